"""A 3-stage pipeline that sends both ways, micro-batch by micro-batch (1F1B-like): activations go down
0 -> 1 -> 2, gradients come back 2 -> 1 -> 0, then a world all_reduce of the gradients.
`python pipeline_1f1b.py healthy | stuck`: stuck: rank 1 hangs in its backward compute before it sends its
gradient back to rank 0 (rank 0 waits in recv from 1, rank 2 in the next micro-batch's recv from 1)."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

FAULT = sys.argv[1] if len(sys.argv) > 1 else "healthy"
FAULT_STEP = 3
MICRO_BATCHES = 2


def mark_fault():
    if os.environ.get("STALL_FILE"):
        with open(os.environ["STALL_FILE"], "a") as fh:
            fh.write(f"{time.time()}\n")


def backward_stage(grad, rank, step):
    if FAULT == "stuck" and rank == 1 and step == FAULT_STEP:
        mark_fault()
        time.sleep(300)  # FAULT stuck: rank 1 stuck in its backward compute
    return grad * 0.5


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    weight_grad = torch.zeros(16)
    for step in range(10):
        for micro in range(MICRO_BATCHES):
            act = torch.randn(4, 16)
            if rank > 0:
                dist.recv(act, src=rank - 1)  # forward: activation from the previous stage
            if rank < world - 1:
                dist.send(torch.tanh(act), dst=rank + 1)  # forward: to the next stage
            grad = torch.ones(4, 16)
            if rank < world - 1:
                dist.recv(grad, src=rank + 1)  # backward: gradient from the next stage
            grad = backward_stage(grad, rank, step)
            if rank > 0:
                dist.send(grad, dst=rank - 1)  # backward: to the previous stage
            weight_grad += grad.sum(0)
        dist.all_reduce(weight_grad)  # data-parallel gradient sync
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
