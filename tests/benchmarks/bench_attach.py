"""Benchmark: `ddpdoctor attach` on a hung local job against py-spy run by hand on each rank (issue 31's speed).

    python tests/benchmarks/bench_attach.py [--nproc 8] [--runs 3] [--interval 3] [--shape stuck|ddp]
    python tests/benchmarks/bench_attach.py --slurm [--runs 3] [--interval 3]   # root, slurm-wlm + munge

A torchrun job (gloo, --nproc ranks, a 30-minute process-group timeout) where rank 1 sits in its own code while
the others wait: in all_reduce (--shape stuck), or inside loss.backward() in DDP's Reducer (--shape ddp: their
Python frames stop in _engine_run_backward, so attach reads their native frames too, py-spy --native, to name
DDP's gradient all_reduce). Measured, alternated, --runs times each:
1. `ddpdoctor attach --pid AGENT --interval 0 --json` (one sample: discovery, every rank's py-spy dump --locals
   in parallel, the judge, the document), wall time of the process;
2. the same with the default samples (four rounds over --interval seconds): what a user waits for;
3. by hand: `py-spy dump --locals --pid P` run on each rank one after the other (what one does without attach,
   before reading any of it).
Target: 1. and 2. minus the interval at most 5 s for 8 ranks.

--slurm: the suite's real SLURM (tests/slurm_cluster.py: 3 slurmd in network namespaces), a job srun starts
itself (one rank per node, rank 1 on node2 stuck), and `srun --overlap --jobid J -N3 --ntasks-per-node=1
ddpdoctor attach --master node1:PORT` timed as a user waits for it, against py-spy by hand: one `srun --overlap
--jobid J -w NODE py-spy dump --locals --pid P` per node, one after the other. Target: at most 15 s.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ddpdoctor.cluster.local import free_port
from ddpdoctor.forensics.evidence.pyspy import binary

JOB = Path(__file__).resolve().parents[1] / "integration" / "attach_job.py"
TARGET_S = 5.0
SLURM_TARGET_S = 15.0


def start(nproc: int, tmp: Path, shape: str = "stuck") -> subprocess.Popen:
    env = dict(os.environ, ATTACH_DIR=str(tmp), ATTACH_SHAPE=shape, ATTACH_LONG_S="0", OMP_NUM_THREADS="1")
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                              "--master-port", str(free_port()), str(JOB)], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not all((tmp / f"ready{r}").exists() for r in range(nproc)):
        if time.monotonic() > deadline or agent.poll() is not None:
            raise SystemExit("the job never got ready")
        time.sleep(0.5)
    time.sleep(2)
    return agent


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return time.perf_counter() - t0, res


def by_hand(pids: list[int], native: bool = False) -> float:
    t0 = time.perf_counter()
    for pid in pids:
        subprocess.run([binary(), "dump", "--locals", *(["--native"] if native else []), "--pid", str(pid)],
                       capture_output=True, timeout=60)
    return time.perf_counter() - t0


def slurm_bench(runs: int, interval: float, shape: str = "stuck") -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.slurm_cluster import SlurmCluster

    with tempfile.TemporaryDirectory() as tmp, SlurmCluster() as cluster:  # up on entry, down on exit
        bin_dir = os.path.dirname(sys.executable)
        env = cluster.env(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
        job = subprocess.Popen(["srun", "-N3", "--ntasks-per-node=1", "--job-name", "bench", sys.executable, str(JOB)],
                               env=dict(env, ATTACH_DIR=tmp, ATTACH_SHAPE=shape, ATTACH_LONG_S="0",
                                        MASTER_ADDR="node1", MASTER_PORT="29571", OMP_NUM_THREADS="1"),
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not all((Path(tmp) / f"ready{r}").exists() for r in range(3)):
            if time.monotonic() > deadline or job.poll() is not None:
                raise SystemExit("the job never got ready")
            time.sleep(0.5)
        time.sleep(2)
        jobid = subprocess.run(["squeue", "-h", "-n", "bench", "-o", "%i"], capture_output=True, text=True,
                               env=env, timeout=30).stdout.split()[0]
        ranks = {}  # node -> pid of its rank (one PID namespace holds every simulated node)
        for proc in psutil.process_iter():
            try:
                penv = proc.environ()
            except psutil.Error:
                continue
            if penv.get("SLURM_JOB_ID") == jobid and str(JOB) in " ".join(proc.cmdline()):
                ranks[penv["SLURMD_NODENAME"]] = proc.pid
        overlap = ["srun", "--overlap", "--jobid", jobid]
        attach = [*overlap, "-N3", "--ntasks-per-node=1", "ddpdoctor", "attach", "--master", "node1:29572",
                  "--json", "--no-save", "--interval"]
        times, hand, named = [], [], set()
        try:
            for _ in range(runs):
                out = Path(tempfile.mkdtemp(dir=tmp))  # each task's document in its own file (srun merges lines)
                s, _ = timed(attach[:6] + [f"--output={out}/task-%t.json", f"--error={out}/task-%t.err"]
                             + attach[6:] + [str(interval)], env)
                times.append(s)
                for f in out.glob("task-*.json"):
                    doc = json.loads(f.read_text() or "{}")
                    if doc.get("role") == "master":
                        named.add(tuple(doc["diagnosis"].get("named") or ()))
                t0 = time.perf_counter()
                for node, pid in sorted(ranks.items()):
                    one = subprocess.run([*overlap, "-w", node, "-N1", "-n1", binary(), "dump", "--locals", "--pid",
                                          str(pid)], capture_output=True, text=True, env=env, timeout=120)
                    if one.returncode != 0 or "Thread" not in one.stdout:
                        raise SystemExit(f"py-spy by hand on {node} failed: {one.stderr[-500:]}")
                hand.append(time.perf_counter() - t0)
            alive = job.poll() is None
        finally:
            subprocess.run(["scancel", jobid], env=env, timeout=30, capture_output=True)
            job.wait(60)
    med = statistics.median
    print(f"3 SLURM nodes (1 rank each, shape {shape}), {runs} runs (median):")
    print(f"  srun --overlap ... ddpdoctor attach, four samples over {interval:g} s: {med(times):.2f} s")
    print(f"  srun --overlap -w NODE py-spy dump --locals by hand: {med(hand):.2f} s for {len(ranks)} nodes")
    print(f"  culprit named: {sorted(named)}; job still running after: {alive}")
    ok = med(times) <= SLURM_TARGET_S and named == {(1,)} and alive
    print(f"target {SLURM_TARGET_S:g} s: {'met' if ok else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--interval", type=float, default=3.0)
    ap.add_argument("--shape", choices=("stuck", "ddp"), default="stuck",
                    help="stuck: the others wait in all_reduce; ddp: in DDP's Reducer (native frames read)")
    ap.add_argument("--slurm", action="store_true", help="3 real SLURM nodes (root, slurm-wlm, munge)")
    args = ap.parse_args()
    if args.slurm:
        slurm_bench(args.runs, args.interval, args.shape)
        return
    with tempfile.TemporaryDirectory() as tmp:
        agent = start(args.nproc, Path(tmp), args.shape)
        try:
            pids = [p.pid for p in psutil.Process(agent.pid).children()]
            base = [sys.executable, "-m", "ddpdoctor", "attach", "--pid", str(agent.pid), "--json", "--no-save"]
            one, two, hand, named, natives, libraries = [], [], [], set(), set(), set()
            for _ in range(args.runs):
                s, res = timed(base + ["--interval", "0"])
                one.append(s)
                named.add(tuple(json.loads(res.stdout)["diagnosis"].get("named") or ()))
                s, res = timed(base + ["--interval", str(args.interval)])
                two.append(s)
                doc = json.loads(res.stdout)
                named.add(tuple(doc["diagnosis"].get("named") or ()))
                natives.add(sum(1 for r in doc["ranks"] if r.get("native")))
                libraries.add(tuple(sorted({str((r.get("wait") or {}).get("library")) for r in doc["ranks"]})))
                hand.append(by_hand(pids, native=args.shape == "ddp"))
            alive = agent.poll() is None and all(psutil.pid_exists(p) for p in pids)
        finally:
            family = psutil.Process(agent.pid).children(recursive=True)  # each worker in a session of its own
            for p in family:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait(30)
            psutil.wait_procs(family, timeout=30)
    med = statistics.median
    print(f"{args.nproc} ranks, {args.runs} runs (median):")
    print(f"  attach, one sample:             {med(one):.2f} s")
    print(f"  attach, four samples over {args.interval:g} s: {med(two):.2f} s "
          f"({med(two) - args.interval:.2f} s besides the interval)")
    print(f"  py-spy dump --locals{' --native' if args.shape == 'ddp' else ''} by hand: {med(hand):.2f} s for "
          f"{len(pids)} processes, one after the other")
    print(f"  ranks read with native frames: {sorted(natives)}; their waits' libraries: {sorted(libraries)}")
    print(f"  culprit named: {sorted(named)}; job still running after: {alive}")
    ok = med(one) <= TARGET_S and med(two) - args.interval <= TARGET_S and named == {(1,)} and alive
    print(f"target {TARGET_S:g} s: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
