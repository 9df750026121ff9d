"""A job for tests/integration/test_attach.py: gloo, the given process-group timeout, a shape chosen by
ATTACH_SHAPE; under torchrun, or under srun alone (the rank from SLURM_PROCID). Each rank writes ready<rank> in ATTACH_DIR when it reaches the place the test reads it at."""
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


def main():
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:  # started by srun itself, as many scripts are
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    rank, shape = dist.get_rank(), os.environ["ATTACH_SHAPE"]
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
