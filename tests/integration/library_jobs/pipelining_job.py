"""A pipeline with torch.distributed.pipelining, as users write it: each rank holds one stage of an MLP (two with
the interleaved schedule), `schedule.step()` runs the micro-batches, sends and receives activations and gradients
in P2POp batches (`batch_isend_irecv`). `python pipelining_job.py FAULT [--schedule gpipe|1f1b|interleaved|batch]`
(several: `--schedule gpipe,1f1b,batch`, run one after the other); `batch` is Megatron-style hand-written
`batch_isend_irecv` with `P2POp(dist.isend, ...)`. The fault is in a stage's own forward (faults.py)."""
import sys
from datetime import timedelta

import faults
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

STEPS = faults.steps(8, straggler=30)
MICRO = 4
WIDTH = 16


class Block(nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.rank, self.step = rank, 0
        self.layer = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        faults.inject(self.rank, self.step)  # the user's stage code
        return torch.tanh(self.layer(x))


def schedules():
    arg = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--schedule=")), None)
    if arg is None and "--schedule" in sys.argv:
        arg = sys.argv[sys.argv.index("--schedule") + 1]
    return (arg or "gpipe").split(",")


def pipeline(kind, rank, world):
    per_rank = 2 if kind == "interleaved" else 1
    stages, blocks = [], []
    for i in range(per_rank):
        index = rank + i * world
        torch.manual_seed(100 + index)
        block = Block(rank)
        blocks.append(block)
        stages.append(PipelineStage(block, index, world * per_rank, torch.device("cpu")))
    loss_fn = F.mse_loss
    if kind == "gpipe":
        return ScheduleGPipe(stages[0], MICRO, loss_fn=loss_fn), blocks, stages
    if kind == "1f1b":
        return Schedule1F1B(stages[0], MICRO, loss_fn=loss_fn), blocks, stages
    return ScheduleInterleaved1F1B(stages, MICRO, loss_fn=loss_fn), blocks, stages


def train(kind, rank, world):
    schedule, blocks, stages = pipeline(kind, rank, world)
    opt = torch.optim.SGD([p for b in blocks for p in b.parameters()], lr=0.05)
    losses = []
    for step in range(STEPS):
        for b in blocks:
            b.step = step
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, WIDTH, generator=g), torch.randn(8, WIDTH, generator=g)
        out = []
        if rank == 0:
            schedule.step(x, target=y, losses=out) if any(s.is_last for s in stages) else schedule.step(x)
        elif any(s.is_last for s in stages):
            schedule.step(target=y, losses=out)
        else:
            schedule.step()
        opt.step()
        opt.zero_grad()
        losses.append(sum(o.item() for o in out))
    return losses


def batch_exchange(rank, world):
    """Megatron-style: each step, send to the next rank and receive from the previous in one batch."""
    torch.manual_seed(7)
    weight = torch.randn(WIDTH)
    losses = []
    for step in range(STEPS):
        faults.inject(rank, step)
        send = torch.tanh(weight * (rank + step + 1))
        recv = torch.empty(WIDTH)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        weight = weight - 0.1 * recv
        losses.append(float(recv.square().sum()))
    return losses


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    losses = []
    for kind in schedules():
        losses += batch_exchange(rank, world) if kind == "batch" else train(kind, rank, world)
    faults.report(rank, losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
