"""A mixture-of-experts dispatch as users write it: every rank routes its tokens to the experts of every rank
with dist.all_to_all_single (uneven splits allowed, as the router decides), then a world all_reduce of the
loss. `python moe.py healthy | splits | fewer | hang`: splits: rank 1's input splits send rank 0 one token more
than it expects (gloo aborts rank 0); fewer: one token fewer (gloo lets it pass: the job ends normally); hang: rank 2 hangs in its router before the all_to_all."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

FAULT = sys.argv[1] if len(sys.argv) > 1 else "healthy"
FAULT_STEP = 3
PER_EXPERT = 2


def mark_fault():
    if os.environ.get("STALL_FILE"):
        with open(os.environ["STALL_FILE"], "a") as fh:
            fh.write(f"{time.time()}\n")


def route(rank, world, step):
    if FAULT == "hang" and rank == 2 and step == FAULT_STEP:
        mark_fault()
        time.sleep(300)  # FAULT hang: rank 2 stuck in its router
    splits = [PER_EXPERT] * world
    if FAULT == "splits" and rank == 1 and step == FAULT_STEP:
        mark_fault()
        splits[0] += 1  # rank 1 sends one token too many to rank 0's expert
    if FAULT == "fewer" and rank == 1 and step == FAULT_STEP:
        mark_fault()
        splits[0] -= 1  # rank 1 sends rank 0's expert one token fewer than rank 0 expects (gloo lets it pass)
    return splits


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(12):
        splits = route(rank, world, step)
        tokens = torch.randn(sum(splits))
        received = torch.empty(PER_EXPERT * world)
        dist.all_to_all_single(received, tokens, [PER_EXPERT] * world, splits)  # FAULT splits: FAULT fewer: the dispatch
        loss = received.sum().reshape(1)
        dist.all_reduce(loss)
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
