"""Fully sharded data parallel (FSDP2, `fully_shard`), as users write it: parameters are all-gathered before
each layer's forward and gradients reduce-scattered after its backward, from FSDP2's hooks.
`python fsdp2_job.py FAULT`; the fault is in the rank's own code between its forward and its backward."""
from datetime import timedelta

import faults
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import fully_shard

STEPS = faults.steps(20, straggler=50)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
        loss = F.mse_loss(model(x), y)
        faults.inject(rank, step)
        loss.backward()  # FSDP2's reduce-scatter of the gradients
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    faults.report(rank, losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
