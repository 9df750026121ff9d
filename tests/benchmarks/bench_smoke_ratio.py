"""Benchmark: a 3-node preflight against the bare torch.distributed smoke test a user would write instead.

    python tests/benchmarks/bench_smoke_ratio.py [--nodes 3] [--runs 5] [--json OUT.json]

Both sides start N fresh processes on 127.0.0.1..N at once and time from the first start to the last exit:
- smoke: each process imports torch, joins a gloo group through a TCPStore on node 0
  (`init_process_group(init_method="tcp://...")`), runs one all_reduce, checks the sum, destroys the group;
- preflight: each process runs `ddpdoctor -q preflight --master 127.0.0.1:P --nnodes N --node-rank i`, every
  default check and the real gloo collective included.
Runs are interleaved (smoke, preflight, smoke, ...) so that background load hits both sides alike; the
medians are compared. Target (issue 41): the preflight at most 1.2 x the smoke test. Exit 0 when met.
Beside the wall times: the CPU of each side's processes (user + system, from the kernel's accounting of the
children) and the load average; a wall ratio taken at a load above the cores measures the scheduler more
than the preflight (each protocol round waits for the slowest node to be given a core).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from ddpdoctor.cluster.local import free_port

TARGET_RATIO = 1.2

SMOKE = """
import sys, torch, torch.distributed as dist
port, rank, world = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == world, t
dist.destroy_process_group()
"""


CPU: list[float] = []  # the CPU seconds of the last _wall's processes, summed


def _wall(argvs: list[list[str]]) -> tuple[float, list[int]]:
    env = dict(os.environ, DDPDOCTOR_NO_SAVE="1", PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                              start_new_session=True) for a in argvs]
    codes, cpu = [], 0.0
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)  # each process's own CPU (and its reaped children's)
        p.returncode = os.waitstatus_to_exitcode(status)
        codes.append(p.returncode)
        cpu += usage.ru_utime + usage.ru_stime
    CPU[:] = [cpu]
    return time.perf_counter() - start, codes


def smoke(n: int) -> tuple[float, list[int]]:
    port = free_port()
    return _wall([[sys.executable, "-c", SMOKE, str(port), str(r), str(n)] for r in range(n)])


def preflight(n: int, out_dir: str) -> tuple[float, list[int]]:
    port = free_port()
    return _wall([[sys.executable, "-m", "ddpdoctor", "-q", "preflight", "--master", f"127.0.0.1:{port}",
                   "--nnodes", str(n), "--node-rank", str(r), "--local-addr", f"127.0.0.{r + 1}",
                   "--timeout", "60", "--output", os.path.join(out_dir, str(r))] for r in range(n)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    out_dir = tempfile.mkdtemp(prefix="ddpd-smoke-")
    smoke(args.nodes)  # warm the page cache once
    times: dict[str, list[float]] = {"smoke": [], "preflight": []}
    cpu: dict[str, list[float]] = {"smoke": [], "preflight": []}
    load = os.getloadavg()[0]
    for i in range(args.runs):
        s, s_codes = smoke(args.nodes)
        cpu["smoke"].append(CPU[0])
        p, p_codes = preflight(args.nodes, os.path.join(out_dir, str(i)))
        cpu["preflight"].append(CPU[0])
        if any(s_codes) or any(c > 1 for c in p_codes):
            print(f"run {i}: smoke exit codes {s_codes}, preflight exit codes {p_codes}", file=sys.stderr)
            return 2
        times["smoke"].append(s)
        times["preflight"].append(p)
        load = max(load, os.getloadavg()[0])
        print(f"run {i}: smoke {s:.2f} s, preflight {p:.2f} s ({p / s:.2f} x); CPU {cpu['smoke'][-1]:.2f} s "
              f"and {cpu['preflight'][-1]:.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    ratio = med["preflight"] / med["smoke"]
    ok = ratio <= TARGET_RATIO
    print(f"load average up to {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{args.nodes} nodes: smoke median {med['smoke']:.2f} s, preflight median {med['preflight']:.2f} s: "
          f"{ratio:.2f} x (target <= {TARGET_RATIO} x)  {'OK' if ok else 'MISSED'}; CPU of all {args.nodes} "
          f"processes {med_cpu['smoke']:.2f} s and {med_cpu['preflight']:.2f} s ({med_cpu['preflight'] / med_cpu['smoke']:.2f} x)")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"runs": times, "cpu": cpu, "median": med, "median_cpu": med_cpu, "ratio": ratio,
                       "load": load}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
