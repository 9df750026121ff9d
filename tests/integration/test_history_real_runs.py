"""Slower-than-its-past on real nccl-bench runs (gloo, two ranks on this machine): four healthy runs in a row raise
no finding, however wide gloo's run-to-run spread on a loaded 2-core machine (0.43 to 1.44 GB/s at 1 MiB here; the
old rule, 80 % of the median alone, called the fourth run slower); then runs pinned to one core that busy loops
hold (the node whose bandwidth truly fell) are found within three runs, at the size where the drop stands out of
the node's own spread. About 2 min on 2 loaded cores: six or seven runs of nccl-bench."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.history import collect

pytestmark = pytest.mark.slow
BENCH = [sys.executable, "-m", "ddpdoctor", "nccl-bench", "-b", "1M", "-e", "4M", "-w", "2", "-n", "5", "--op",
         "all_reduce", "-q"]


def bench(out: Path, busy_core: bool) -> list[float]:
    spin, pin = [], []
    if busy_core:  # both ranks on CPU 0, beside three loops that keep it busy (the machine is busy already)
        spin = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"]) for _ in range(3)]
        pin = ["taskset", "-c", "0"]
    try:
        p = subprocess.run([*pin, *BENCH, "-o", str(out)], capture_output=True, text=True, timeout=240)
    finally:
        for s in spin:
            s.kill()
            s.wait()
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
    return [r["in_place"]["busbw_gbs"] for r in json.loads((out / "nccl-bench.json").read_text())["rows"]]


def _spread(values) -> float:
    """The robust spread (1.4826 x MAD) of one size's runs, as a fraction of their median."""
    median = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - median) for v in values) / median


@pytest.mark.timeout(600)
def test_healthy_noise_is_no_finding_and_a_busy_core_is(tmp_path):
    node = tmp_path / "node1"
    seen = [bench(node / f"run{i}", busy_core=False) for i in range(4)]
    assert collect(tmp_path)["findings"] == [], seen
    steady = min(_spread(column) for column in zip(*seen))
    if steady > 0.15:  # the rest of the suite holds both cores: a fall to 40 % cannot stand 3 spreads out
        pytest.skip(f"healthy runs spread {steady:.0%} of their median at every size on this loaded machine "
                    f"({seen}): the no-false-alarm half passed; the busy-core half needs a steadier baseline")
    for i in (4, 5, 6):  # the node stays slow: a finding within three runs (at two sizes, or twice in a row)
        seen.append(bench(node / f"run{i}", busy_core=True))
        findings = collect(tmp_path)["findings"]
        if findings:
            break
    assert [(f["kind"], f["op"]) for f in findings] == [("slower", "all_reduce")], (findings, seen)
    assert findings[0]["ratio"] < 0.8 and (findings[0]["consecutive"] or findings[0]["sizes"] >= 2), findings
