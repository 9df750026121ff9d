"""Tensor x data parallel on 4 ranks as users write it: tensor-parallel pairs new_group([0, 1]) and
new_group([2, 3]) all_reduce their partial outputs, then the world all_reduces the gradients.
`python tpdp.py healthy | stuck`: stuck: rank 3 hangs in its attention block before its pair's all_reduce
(rank 2 waits in the pair's all_reduce, ranks 0 and 1 in the world's)."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

FAULT = sys.argv[1] if len(sys.argv) > 1 else "healthy"
FAULT_STEP = 3


def mark_fault():
    if os.environ.get("STALL_FILE"):
        with open(os.environ["STALL_FILE"], "a") as fh:
            fh.write(f"{time.time()}\n")


def attention_block(x, rank, step):
    if FAULT == "stuck" and rank == 3 and step == FAULT_STEP:
        mark_fault()
        time.sleep(300)  # FAULT stuck: rank 3 stuck in its attention block
    return x * 2


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    for step in range(12):
        partial = attention_block(torch.randn(8), rank, step)
        dist.all_reduce(partial, group=pairs[rank // 2])  # tensor parallel: within the pair
        grad = partial.clone()
        dist.all_reduce(grad)  # data parallel: the world
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
