"""Benchmark: slower-than-its-past on real nccl-bench runs (gloo, two ranks on this machine): four healthy runs in a
row, then runs pinned to one core that busy loops hold (the node whose bandwidth truly fell), until a finding or
three such runs. Prints each run's busbw per size, each run's findings and the verdict. Moved out of the suite
(tests/integration/test_history_real_runs.py keeps the healthy half): its busy loops slowed every test beside it
and its answer depends on how loaded the machine already is (on a loaded 2-core machine the healthy runs spread
too wide for a fall to stand out).

    python tests/benchmarks/bench_history_real_runs.py [--busy-runs 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ddpdoctor.history import collect  # noqa: E402
from tests.integration.test_history_real_runs import bench  # noqa: E402


def spread(values) -> float:
    """The robust spread (1.4826 x MAD) of one size's runs, as a fraction of their median."""
    median = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - median) for v in values) / median


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy-runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(tmp) / "node1"
        seen = []
        for i in range(4):
            seen.append(bench(node / f"run{i}", busy_core=False))
            print(f"healthy run {i}: busbw GB/s per size {seen[-1]}; findings {collect(Path(tmp))['findings']}")
        steady = min(spread(column) for column in zip(*seen))
        print(f"healthy spread, steadiest size: {steady:.0%} of the median")
        for i in range(4, 4 + a.busy_runs):
            seen.append(bench(node / f"run{i}", busy_core=True))
            findings = collect(Path(tmp))["findings"]
            print(f"busy-core run {i}: busbw {seen[-1]}; findings {[(f['kind'], f['op'], f.get('ratio')) for f in findings]}")
            if findings:
                print(f"found after {i - 3} busy run(s)")
                return 0
        print("no finding after the busy runs")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
