"""A pytest plugin that records the CPU time of every test: the test process and all it started (user + system).

Why CPU and not wall time: the suite is CPU-bound on CI's 2 cores, so its duration there is about its CPU total
over the cores; CPU time is what a test costs whatever else the machine runs, where wall time on a shared
machine is mostly other people's load. Opt-in, never part of the suite:

    DDPDOCTOR_CPU_CENSUS=/tmp/census python3 -m pytest -p tests.cpu_census -n 4 --dist loadgroup tests/...
    python3 -m tests.cpu_census /tmp/census        # per-file table, the slowest tests, the total

A test's CPU is the growth, over its run (its fixtures' set-up and teardown included), of the CPU of the test
process and every live descendant, each counted with the children it has reaped: a node forked by the zygote
and reaped by it is counted in the zygote's children time. Processes orphaned to init (none of ours on
purpose) are lost.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest


def tree_cpu() -> float:
    """User + system seconds of this process and its live descendants, each with its reaped children."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone between the listing and the read: its time lands in its parent's children time
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _out_file() -> Path | None:
    where = os.environ.get("DDPDOCTOR_CPU_CENSUS")
    if not where:
        return None
    Path(where).mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return Path(where) / f"cpu-{worker}-{os.getpid()}.jsonl"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = _out_file()
    cpu0, wall0 = tree_cpu(), time.monotonic()
    yield
    if out is None:
        return
    row = {"nodeid": item.nodeid, "cpu_s": round(tree_cpu() - cpu0, 3), "wall_s": round(time.monotonic() - wall0, 3)}
    with out.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def summarise(where: Path, top: int = 30) -> str:
    rows = [json.loads(line) for f in sorted(where.glob("cpu-*.jsonl")) for line in f.read_text().splitlines()]
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        agg = per_file[r["nodeid"].split("::")[0]]
        agg[0] += r["cpu_s"]
        agg[1] += r["wall_s"]
        agg[2] += 1
    lines = [f"{'cpu_s':>8} {'wall_s':>8} {'tests':>5}  file"]
    for name, (cpu, wall, n) in sorted(per_file.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{cpu:8.1f} {wall:8.1f} {n:5d}  {name}")
    total = sum(r["cpu_s"] for r in rows)
    lines.append(f"{total:8.1f} {sum(r['wall_s'] for r in rows):8.1f} {len(rows):5d}  TOTAL")
    lines.append("")
    lines.append(f"the {top} tests with the most CPU:")
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['nodeid']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30))
