"""Benchmark: CLI start-up and a full single-node preflight, against `import torch` on the same machine.

    python tests/benchmarks/bench_foundation.py [--runs 5] [--json OUT.json]

Targets (issue 2): `ddpdoctor --help` under 0.3 s; `ddpdoctor preflight` (every default check) within 1 s
of the time a fresh `python -c "import torch"` takes. Medians of --runs fresh processes each, interleaved
so that background load hits both sides alike. Exit 0 when both targets are met, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

HELP_TARGET_S = 0.3
PREFLIGHT_MARGIN_S = 1.0


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return time.perf_counter() - start


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
        wall(argv)  # warm the page cache once
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(wall(argv))
    med = {k: statistics.median(v) for k, v in times.items()}
    ok_help = med["help"] < HELP_TARGET_S
    margin = med["preflight"] - med["import_torch"]
    ok_pre = margin <= PREFLIGHT_MARGIN_S
    print(f"ddpdoctor --help        median {med['help']:.3f} s   (target < {HELP_TARGET_S} s)  {'OK' if ok_help else 'MISSED'}")
    print(f"python -c 'import torch' median {med['import_torch']:.3f} s")
    print(f"ddpdoctor preflight     median {med['preflight']:.3f} s   (+{margin:.3f} s over import torch; "
          f"target <= +{PREFLIGHT_MARGIN_S} s)  {'OK' if ok_pre else 'MISSED'}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"runs": times, "median": med}, fh, indent=1)
    return 0 if ok_help and ok_pre else 1


if __name__ == "__main__":
    sys.exit(main())
