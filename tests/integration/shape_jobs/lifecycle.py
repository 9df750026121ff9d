"""A data-parallel loop (a world all_reduce per step) whose ranks start, die or leave unevenly.
`python lifecycle.py healthy | noinit | kill | early`: noinit: rank 2 hangs loading its config before
init_process_group (the others wait inside it); kill: rank 1 writes its pid to $PID_FILE and spends long in an
evaluation while the others wait in the all_reduce, until someone outside SIGKILLs it (the OOM killer, an
operator); early: rank 2's data runs out and it returns (exit 0) while the others wait in the all_reduce."""
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


def load_config(rank):
    if FAULT == "noinit" and rank == 2:
        mark_fault()
        time.sleep(300)  # FAULT noinit: rank 2 never reaches init_process_group
    return {"steps": 12}


def evaluate(rank):
    with open(os.environ["PID_FILE"] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(os.environ["PID_FILE"] + ".tmp", os.environ["PID_FILE"])
    mark_fault()
    time.sleep(300)  # FAULT kill: rank 1 in a long evaluation, until it is killed


def main():
    rank = int(os.environ["RANK"])
    config = load_config(rank)
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    for step in range(config["steps"]):
        if FAULT == "early" and rank == 2 and step == FAULT_STEP:
            mark_fault()
            sys.exit(0)  # FAULT early: rank 2's data ran out
        if FAULT == "kill" and rank == 1 and step == FAULT_STEP:
            evaluate(rank)
        grad = torch.randn(16)
        dist.all_reduce(grad)  # the world all_reduce of the gradients
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
