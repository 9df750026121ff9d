"""Data parallel training with DistributedDataParallel, as users write it: DDP's gradient all_reduce runs inside
loss.backward() (c10d's Reducer, from C++). `python ddp_job.py FAULT [--compile]`; the fault is in the rank's
own code between its forward and its backward (faults.py). --compile: torch.compile(DDP(model))."""
import sys
from datetime import timedelta

import faults
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = faults.steps(30, straggler=60)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    if "--compile" in sys.argv:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
        loss = F.mse_loss(model(x), y)
        faults.inject(rank, step)
        loss.backward()  # DDP's gradient all_reduce
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    faults.report(rank, losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
