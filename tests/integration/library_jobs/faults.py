"""The faults a library job injects into one rank's own code (test scaffolding, imported as a user imports a
helper of their own): `python <lib>_job.py healthy | hang | raise | kill | straggler [options]`.

- hang: rank FAULT_RANK sleeps in its own code at step FAULT_STEP (the others wait inside the library);
- raise: it raises there;
- kill: it writes its pid to $PID_FILE and sleeps there, until the runner SIGKILLs it from outside;
- straggler: it spends STRAGGLE_X times a step's compute in its own code, every step (the job passes).

A fault's line carries a `# FAULT <mode>:` comment: where the culprit stands (file:line in the verdict).
`STALL_FILE` gets the time the fault starts; `LOSS_DIR` each rank's losses at the end (rank<R>.json), so a test
compares a healthy job's losses under plain torchrun and under run-trainer.
"""
import json
import os
import sys
import time

FAULT = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "healthy"
FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
FAULT_STEP = 3
STRAGGLE_S = 0.2  # per step: 5x and more the compute of these small models


def steps(healthy: int, straggler: int) -> int:
    """The job's steps: a straggler runs long enough to be judged live (tens of collectives, several polls)."""
    return straggler if FAULT == "straggler" else healthy


def mark() -> None:
    if os.environ.get("STALL_FILE"):
        with open(os.environ["STALL_FILE"], "a") as fh:
            fh.write(f"{time.time()}\n")


def _pid() -> None:
    path = os.environ["PID_FILE"]
    with open(path + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def inject(rank: int, step: int) -> None:
    """Called from the job's own code once per step, on every rank."""
    if rank != FAULT_RANK or FAULT == "healthy":
        return
    if FAULT == "straggler":
        if step == FAULT_STEP:
            mark()
        time.sleep(STRAGGLE_S)  # FAULT straggler: its own code, slower every step
        return
    if step != FAULT_STEP:
        return
    mark()
    if FAULT == "hang":
        time.sleep(300)  # FAULT hang: stuck in its own code
    if FAULT == "raise":
        raise RuntimeError("a bad batch on this rank")  # FAULT raise: an exception in its own code
    if FAULT == "kill":
        _pid()
        time.sleep(300)  # FAULT kill: until someone outside SIGKILLs it


def report(rank: int, losses: list[float]) -> None:
    """Each rank's losses (exact floats) for the healthy-run comparison."""
    print(f"rank {rank} losses {losses}", flush=True)
    folder = os.environ.get("LOSS_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as fh:
            json.dump([float(x) for x in losses], fh)
