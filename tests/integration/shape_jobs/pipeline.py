"""A 4-stage pipeline as users write it: activations go 0 -> 1 -> 2 -> 3 with dist.send/dist.recv, then every
stage joins a world all_reduce of the loss. `python pipeline.py healthy | stuck | shape`:
stuck: rank 2 hangs in its own compute (forward_stage) before its send; shape: rank 2 sends an activation of
another shape than the one rank 3 receives into."""
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


def forward_stage(x, rank, step):
    if FAULT == "stuck" and rank == 2 and step == FAULT_STEP:
        mark_fault()
        time.sleep(300)  # FAULT stuck: rank 2 stuck in its own compute
    return torch.tanh(x) + 0.1


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(12):
        act = torch.randn(4, 16)
        if rank > 0:
            dist.recv(act, src=rank - 1)  # activation from the previous stage
        act = forward_stage(act, rank, step)
        if rank < world - 1:
            if FAULT == "shape" and rank == 2 and step == FAULT_STEP:
                mark_fault()
                dist.send(torch.cat([act, act], dim=1), dst=rank + 1)  # FAULT shape: a (4, 32) activation
            else:
                dist.send(act, dst=rank + 1)
        loss = act.sum().reshape(1)
        dist.all_reduce(loss)  # the world all_reduce of the loss
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
