"""Jobs built on the libraries people train with (issue 37), as users write them: DDP (its gradient all_reduce
inside loss.backward()), FSDP2 `fully_shard`, `torch.distributed.pipelining` schedules, tensor parallelism on a
2-D DeviceMesh (DTensor + FSDP2), a Lightning Trainer and Accelerate; gloo on CPU, each script with its own
`init_process_group(timeout=20 s)` where the user sets one. The fault (faults.py) is in one rank's own code:
`hang`, `raise`, `kill` (SIGKILLed from outside), `straggler`, or none (`healthy`).

`job(library, fault)` is a `shape_jobs.Shape`, so the runners of shape_jobs serve them: run-trainer, plain
torchrun (with a scheduler's SIGTERM for the jobs that would hang 30 minutes), postmortem of the log dir.
Ray Train's job (ray_job.py) is not among them: Ray starts its own workers (no torchrun), so only attach's tests
run it (tests/integration/test_attach_ray.py, bench_attach_libraries.py).
"""
from __future__ import annotations

from pathlib import Path

from tests.integration.shape_jobs import Shape

HERE = Path(__file__).resolve().parent
FAULT_RANK = 1
# library -> (script, ranks, extra arguments)
LIBRARIES = {
    "ddp": ("ddp_job.py", 2, ()),
    "fsdp2": ("fsdp2_job.py", 2, ()),
    "pipelining-gpipe": ("pipelining_job.py", 3, ("--schedule", "gpipe")),
    "pipelining-1f1b": ("pipelining_job.py", 3, ("--schedule", "1f1b")),
    "pipelining-interleaved": ("pipelining_job.py", 2, ("--schedule", "interleaved")),
    "batch-p2p": ("pipelining_job.py", 3, ("--schedule", "batch")),
    "tp-dp": ("tp_job.py", 4, ()),
    "lightning": ("lightning_job.py", 2, ()),
    "accelerate": ("accelerate_job.py", 2, ()),
    "ddp-compiled": ("ddp_job.py", 2, ("--compile",)),
    "hf-trainer": ("hf_trainer_job.py", 2, ()),
}
FAULTS = ("healthy", "hang", "raise", "kill", "straggler")
# DeviceMesh's subgroups keep torch's 30-minute default timeout whatever init_process_group was given: under plain
# torchrun such a hang ends only when the scheduler stops the job (SIGTERM to every process), here 25 s after it.
SCHEDULER_STOP_S = 25.0
# HF Trainer on the CPU: ddp_timeout=20 set, yet its process group waited past it (issue 45 item 6: the rank
# waiting in DDP's all_reduce never timed out within the 25 s), so plain torchrun hangs until the scheduler's stop.
THIRTY_MINUTES = {"tp-dp", "hf-trainer"}


def job(library: str, fault: str) -> Shape:
    script, nproc, args = LIBRARIES[library]
    faulty = fault not in ("healthy", "straggler")
    return Shape(f"{library}-{fault}", script, fault, nproc, (FAULT_RANK,) if faulty else (),
                 f"# FAULT {fault}:" if faulty and fault != "kill" else None, hangs=fault == "hang",
                 kill_rank=FAULT_RANK if fault == "kill" else None, what=f"{library}: {fault} on rank {FAULT_RANK}",
                 folder=HERE, args=args, marker_file="faults.py",
                 straggler=FAULT_RANK if fault == "straggler" else None,
                 stop_after_s=SCHEDULER_STOP_S if fault == "hang" and library in THIRTY_MINUTES else None)
