"""Benchmark: CLI start-up and a full single-node preflight, against `import torch` on the same machine.

    python tests/benchmarks/bench_foundation.py [--runs 5] [--json OUT.json]

Targets: `ddpdoctor --help` under 0.3 s (issue 2); `ddpdoctor preflight` (every default check) within
0.3 s of the time a fresh `python -c "import torch"` takes (issue 41; it was 1 s). Medians of --runs fresh
processes each, interleaved so that background load hits both sides alike. Beside the wall times: each
process's CPU (user + system, from the kernel's accounting of the child), which another job's load does not
inflate the way it inflates wall time: the load average is printed, and a wall figure taken at a load above
the cores says more about the machine than about the preflight. Exit 0 when both targets are met, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HELP_TARGET_S = 0.3
PREFLIGHT_MARGIN_S = 0.3


def wall_and_cpu(argv: list[str]) -> tuple[float, float]:
    """Wall seconds from start to exit, and the process's CPU seconds (user + system, its children included)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = 0  # reaped above: keep Popen from waiting on it again
    return took, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    py = sys.executable
    cases = {
        "help": [py, "-m", "ddpdoctor", "--help"],
        "import_torch": [py, "-c", "import torch"],
        "preflight": [py, "-m", "ddpdoctor", "-q", "preflight"],
    }
    for argv in cases.values():
        wall_and_cpu(argv)  # warm the page cache once
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            took, used = wall_and_cpu(argv)
            times[name].append(took)
            cpu[name].append(used)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    ok_help = med["help"] < HELP_TARGET_S
    margin = med["preflight"] - med["import_torch"]
    ok_pre = margin <= PREFLIGHT_MARGIN_S
    load = max(load_before, os.getloadavg()[0])
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs (wall figures mean little above {os.cpu_count()})")
    print(f"ddpdoctor --help         median {med['help']:.3f} s, CPU {med_cpu['help']:.3f} s   "
          f"(target < {HELP_TARGET_S} s)  {'OK' if ok_help else 'MISSED'}")
    print(f"python -c 'import torch' median {med['import_torch']:.3f} s, CPU {med_cpu['import_torch']:.3f} s")
    print(f"ddpdoctor preflight      median {med['preflight']:.3f} s, CPU {med_cpu['preflight']:.3f} s   "
          f"(+{margin:.3f} s wall, +{med_cpu['preflight'] - med_cpu['import_torch']:.3f} s CPU over import torch; "
          f"target <= +{PREFLIGHT_MARGIN_S} s)  {'OK' if ok_pre else 'MISSED'}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"runs": times, "cpu": cpu, "median": med, "median_cpu": med_cpu, "load": load}, fh, indent=1)
    return 0 if ok_help and ok_pre else 1


if __name__ == "__main__":
    sys.exit(main())
