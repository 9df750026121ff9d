"""Fully-sharded data parallel by hand, as users write it: each layer's weight is sharded; the forward
all_gathers each layer (all_gather_into_tensor), the backward reduce_scatters each layer's gradient
(reduce_scatter_tensor). `python fsdp.py healthy | skip`: skip: rank 1 reuses a cached full weight for
layer 1 instead of all_gathering it, so its next collective (a reduce_scatter) meets the others' all_gather."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

FAULT = sys.argv[1] if len(sys.argv) > 1 else "healthy"
FAULT_STEP = 3
LAYERS = 2
SHARD = 8
CACHE = {}


def mark_fault():
    if os.environ.get("STALL_FILE"):
        with open(os.environ["STALL_FILE"], "a") as fh:
            fh.write(f"{time.time()}\n")


def unshard(shard, layer, rank, world, step):
    if FAULT == "skip" and rank == 1 and step == FAULT_STEP and layer == 1:
        mark_fault()
        return CACHE[layer]  # rank 1 skips this all_gather: its cached weight looks current
    full = torch.empty(SHARD * world)
    dist.all_gather_into_tensor(full, shard)  # FSDP unshard
    CACHE[layer] = full
    return full


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    shards = [torch.randn(SHARD) for _ in range(LAYERS)]
    for step in range(10):
        x = torch.randn(SHARD * world)
        for layer in range(LAYERS):
            x = torch.tanh(x * unshard(shards[layer], layer, rank, world, step))
        for layer in reversed(range(LAYERS)):
            grad_shard = torch.empty(SHARD)
            dist.reduce_scatter_tensor(grad_shard, x.clone())  # FAULT skip: the gradient reduce_scatter
            shards[layer] -= 0.01 * grad_shard
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
