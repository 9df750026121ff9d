"""Benchmark: `ddpdoctor run-trainer` against plain `torchrun` running the same reference trainer, same steps.

    python tests/benchmarks/bench_trainer_overhead.py [--nproc 2] [--steps 300] [--runs 3]

Alternates the two (plain, run-trainer, plain, ...) and compares median wall times. run-trainer runs with
--no-preflight here (the preflight is a separate, optional gate), but with everything else it adds: per-rank
log files and error files, output pumping, the post-mortem and run.json. Target (issue 5): at most 5% more.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from ddpdoctor.cluster.local import free_port

TARGET = 0.05


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=1200)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    trainer = ["--steps", str(args.steps), "--log-every", "50"]
    plain, ours = [], []
    for _ in range(args.runs):
        run_dir = tempfile.mkdtemp(prefix="bench-plain-")
        plain.append(timed([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                            "-m", "ddpdoctor_trainer.train", "--run-dir", run_dir, *trainer]))
        run_dir = tempfile.mkdtemp(prefix="bench-ours-")
        ours.append(timed([sys.executable, "-m", "ddpdoctor", "-q", "run-trainer", "--no-preflight",
                           "--nproc-per-node", str(args.nproc), "--run-dir", run_dir, "--", *trainer]))
    p, o = statistics.median(plain), statistics.median(ours)
    overhead = (o - p) / p
    print(f"plain torchrun: median {p:.2f} s {[round(x, 2) for x in plain]}")
    print(f"run-trainer:    median {o:.2f} s {[round(x, 2) for x in ours]}")
    print(f"overhead: {overhead * 100:+.1f}% (target <= {TARGET * 100:.0f}%)")
    return 0 if overhead <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
