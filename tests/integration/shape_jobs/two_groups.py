"""Two process groups over the same 3 ranks, as users write them: the world for gradients and a second group
for metrics. `python two_groups.py healthy | guarded`: guarded: only the last rank all_reduces its metrics
in the metrics group at one step (`if rank == world - 1:`), then every rank goes on to the world's
all_reduce: the last rank waits in the metrics group, the others in the world."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

FAULT = sys.argv[1] if len(sys.argv) > 1 else "healthy"
FAULT_STEP = 4


def mark_fault():
    if os.environ.get("STALL_FILE"):
        with open(os.environ["STALL_FILE"], "a") as fh:
            fh.write(f"{time.time()}\n")


def log_metrics(metrics, metrics_pg, rank, world, step):
    if FAULT == "guarded" and step == FAULT_STEP:
        if rank == world - 1:
            mark_fault()
            dist.all_reduce(metrics, group=metrics_pg)  # FAULT guarded: only the last rank
    elif step % 2 == 0:
        dist.all_reduce(metrics, group=metrics_pg)  # every rank's metrics


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    metrics_pg = dist.new_group(list(range(world)))
    for step in range(12):
        grad = torch.randn(16)
        dist.all_reduce(grad)  # gradients: the world
        log_metrics(grad[:4].clone(), metrics_pg, rank, world, step)
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
