"""Benchmark: what the size watch (launch/size_watch.py, Python 3.12+) costs a healthy job.

    PY312=/path/to/python3.12 python tests/benchmarks/bench_size_watch.py [--runs 5] [--steps 2000]

Two ranks on gloo under run-trainer's bootstrap (`torchrun -m ddpdoctor.launch.bootstrap`), each step a send,
a receive and an all_to_all_single of 16 floats (the worst case: nothing but watched calls), with
DDPDOCTOR_CALLS_DIR set (watched) and unset (plain), runs interleaved. Prints the median per-step time of each
and the added microseconds per watched call; then the wall time of the pipelining job (every schedule) both
ways. A call to gloo on loopback costs tens of microseconds, NCCL's Python side about as much: the watch adds a
few microseconds to each watched call and nothing to any other code.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
x, y = torch.ones(16), torch.empty(16)
def step():
    if r == 0:
        dist.send(x, 1); dist.recv(y, 1)
    else:
        dist.recv(y, 0); dist.send(x, 0)
    dist.all_to_all_single(y, x)
for _ in range(200):
    step()
dist.barrier()
t = time.perf_counter()
for _ in range(STEPS):
    step()
if r == 0:
    print("US_PER_STEP", (time.perf_counter() - t) / STEPS * 1e6)
dist.destroy_process_group()
"""


def run(python: str, script: Path, watched: bool, work: Path, args: list[str] = ()) -> tuple[float | None, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DDPDOCTOR_CALLS_DIR", None)
    if watched:
        env["DDPDOCTOR_CALLS_DIR"] = str(work / "calls")
    t = time.perf_counter()
    p = subprocess.run([python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
                        "ddpdoctor.launch.bootstrap", str(script), *args], capture_output=True, text=True,
                       timeout=600, env=env, cwd=work, check=False)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    line = next((ln for ln in p.stdout.splitlines() if "US_PER_STEP" in ln), None)
    return (float(line.split()[-1]) if line else None), wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2000)
    a = ap.parse_args()
    python = os.environ.get("PY312") or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        loop = work / "loop.py"
        loop.write_text(LOOP.replace("STEPS", str(a.steps)))
        steps = {True: [], False: []}
        for _ in range(a.runs):
            for watched in (False, True):
                steps[watched].append(run(python, loop, watched, work)[0])
        plain, watched = statistics.median(steps[False]), statistics.median(steps[True])
        print(f"comm-only loop, 3 watched calls a step: plain {plain:.1f} us/step, watched {watched:.1f} us/step "
              f"(+{(watched - plain) / 3:.1f} us a call, x{watched / plain:.3f})")
        job = ROOT / "tests/integration/library_jobs/pipelining_job.py"
        walls = {True: [], False: []}
        for _ in range(a.runs):
            for w in (False, True):
                walls[w].append(run(python, job, w, work, ["healthy", "--schedule", "gpipe,1f1b,interleaved,batch"])[1])
        p, w = statistics.median(walls[False]), statistics.median(walls[True])
        print(f"pipelining job (every schedule, 2 ranks): plain {p:.2f} s, watched {w:.2f} s (x{w / p:.3f})")


if __name__ == "__main__":
    main()
