"""Tensor parallel x data parallel on a 2-D DeviceMesh, as users write it: `parallelize_module` shards each MLP's
linears over the "tp" dimension (DTensor redistributions: all_reduce / all_gather inside the forward and the
backward), `fully_shard` (FSDP2) over "dp". 4 ranks: dp 2 x tp 2. `python tp_job.py FAULT`; the fault is in the
rank's own code between its forward and its backward (faults.py)."""
from datetime import timedelta

import faults
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

STEPS = faults.steps(20, straggler=50)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    dp_rank = mesh["dp"].get_local_rank()
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + dp_rank)  # the same batch on a tp pair
        x, y = torch.randn(8, 32, generator=g), torch.randn(8, 32, generator=g)
        loss = F.mse_loss(model(x), y)
        faults.inject(rank, step)
        loss.backward()  # DTensor's and FSDP2's collectives
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    faults.report(rank, losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
