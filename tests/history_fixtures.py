"""A results directory with a long history, for the history tests and benchmark: per node, node-check records (real
preflight documents, the facts padded to a real record's ~20 KB when asked) and nccl-bench results, one node whose
bandwidth drops in its last run, one whose clock-sync check flaps."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from ddpdoctor import documents
from ddpdoctor.api import Level, Result

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _created(i: int, j: int) -> str:
    return (START + dt.timedelta(minutes=5 * i, seconds=j)).isoformat(timespec="seconds")


def node_check_doc(node: str, i: int, *, flapping: bool, pad: int = 0, action: str = "") -> dict:
    clock = Level.WARN if flapping and (i % 2) else Level.PASS
    results = [Result("resources", Level.PASS, "/dev/shm 16 GiB", [node]),
               Result("clock-sync", clock, "clock not synchronised" if clock is Level.WARN else "synchronised", [node]),
               Result("gpu", Level.SKIP, "no NVIDIA driver", [node])]
    facts = {"packages": {"distributions": [f"pkg{k}==1.{k}" for k in range(pad // 16)]}} if pad else {}
    doc = documents.preflight_doc(scope="node", nodes={node: {"rank": 0, "host": node, "addr": None, "facts": facts,
                                                              "gather": {}}},
                                  checks=[], results=results, run={}, run_id=f"hc-{node}-{i}")
    doc["created"] = _created(i, 0)
    doc["node_check"] = {"context": "health_check", "node": node, "job_id": None, "action": "none"}
    if action:  # the node check drained or resumed the node at this run (scontrol succeeded)
        doc["node_check"].update(action=action, scontrol={"command": ["scontrol"], "ok": True, "error": None})
        if action == "drain":
            next(r for r in doc["results"] if r["check"] == "resources").update(level="fail",
                                                                                summary="/dev/shm is 64 MiB")
            doc["verdict"] = "fail"
    return doc


def bench_doc(node: str, i: int, *, busbw: float) -> dict:
    rows = [{"op": "all_reduce", "size": size, "count": size // 4, "dtype": "float32", "redop": "sum", "root": -1,
             "group": None, "out_of_place": {"busbw_gbs": busbw * (0.5 + k / 4), "algbw_gbs": busbw, "time_us": 10.0,
                                             "wrong": 0}, "in_place": None}
            for k, size in enumerate((1 << 20, 1 << 24))]
    doc = documents.envelope("nccl-bench", run_id=f"bench-{node}-{i}", run={"backend": "nccl"},
                             hosts={"0": node, "1": node}, rows=rows, summary={}, verdict="pass", exit_code=0)
    doc["created"] = _created(i, 1)
    return doc


def write_history(root: Path, *, nodes: int = 4, runs: int = 12, bench_every: int = 1, pad: int = 0) -> int:
    """node1's last nccl-bench is at 40 % of its past; node2's clock-sync flaps; node3 is drained by the node check
    halfway (its resources check failing) and resumed two runs later. Returns the files written."""
    written = 0
    for n in range(1, nodes + 1):
        node = f"node{n}"
        folder = root / node
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(runs):
            action = {runs // 2: "drain", runs // 2 + 2: "resume"}.get(i, "") if n == 3 else ""
            doc = node_check_doc(node, i, flapping=n == 2, pad=pad, action=action)
            (folder / f"{i:06d}-health_check.json").write_text(json.dumps(doc))
            written += 1
            if i % bench_every == 0:
                slow = n == 1 and i >= runs - bench_every
                (folder / f"{i:06d}-nccl-bench.json").write_text(json.dumps(bench_doc(node, i, busbw=0.4 if slow else 1.0)))
                written += 1
    return written
