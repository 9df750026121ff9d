"""A job for tests/integration/test_attach*.py: gloo, a 30-minute process-group timeout, a shape chosen by
ATTACH_SHAPE; under torchrun, or under srun alone (the rank from SLURM_PROCID). Each rank writes ready<rank> in
ATTACH_DIR when it reaches the place the test reads it at.

`ddp`: DistributedDataParallel (its gradient all_reduce inside loss.backward(), from C++): rank 1 first takes
one long step (ATTACH_LONG_S seconds of CPU in its own code, before its backward: rank 0 waits in DDP's
Reducer meanwhile; long<rank> marks its start), then hangs before the backward of a later step (sleeping, as a
stuck data loader or a deadlock would), where every other rank waits in DDP's Reducer (ready<rank>)."""
import datetime
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def ready(rank):
    Path(os.environ["ATTACH_DIR"], f"ready{rank}").write_text("1")


def own_compute(seconds):
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.5)


def spin(seconds):
    end = time.time() + seconds
    x = 0
    while time.time() < end:
        x += 1  # CPU in the rank's own code: a long step
    return x


def ddp(rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100000):
        loss = model(torch.randn(8, 16)).sum()
        if rank == 1 and step == 3:
            Path(os.environ["ATTACH_DIR"], f"long{rank}").write_text("1")
            spin(float(os.environ.get("ATTACH_LONG_S", "10")))
        if step == 6:
            ready(rank)
            if rank == 1:
                own_compute(3600)
        loss.backward()  # DDP's gradient all_reduce
        opt.step()
        opt.zero_grad()


def main():
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:  # started by srun itself, as many scripts are
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    rank, shape = dist.get_rank(), os.environ["ATTACH_SHAPE"]
    if shape == "ddp":
        return ddp(rank)
    t = torch.ones(8)
    dist.all_reduce(t)
    ready(rank)
    if shape == "stuck":
        if rank == 1:
            own_compute(3600)
        dist.all_reduce(t)
    elif shape == "desync":
        if rank == 2:
            dist.broadcast(t, 0)
        else:
            dist.all_reduce(t)
    elif shape == "healthy":
        end = time.time() + 600
        while time.time() < end:
            dist.all_reduce(t)
            time.sleep(0.02)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
