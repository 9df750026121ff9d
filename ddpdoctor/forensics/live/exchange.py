"""Several nodes, one verdict: each node's watchdog publishes its evidence in the run's shared exchange folder and
gathers the others' (files written whole), and marks a rank of its node that is failing."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..evidence import job_files


def publish(exchange: Path, node: str, evidence: dict[int, dict], keep: int = 50) -> None:
    """This node's evidence, for the other nodes' watchdogs (written whole: temp file, then rename)."""
    exchange.mkdir(parents=True, exist_ok=True)
    thin = {str(r): dict(ev, fr=last_entries(ev.get("fr"), keep)) for r, ev in evidence.items()}
    tmp = exchange / f".{node}.json.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({"node": node, "evidence": thin}, default=str))
        os.replace(tmp, exchange / f"{node}.json")
    finally:
        tmp.unlink(missing_ok=True)


def published(exchange: Path, exclude: str) -> list[Path]:
    try:
        return [p for p in exchange.glob("*.json") if p.stem != exclude]
    except OSError:
        return []


def mark_failing(exchange: Path, node: str, since: float) -> None:
    """A rank of this node raised and is ending (since ``since``): the other nodes' ranks wait for it, and their
    watchdogs leave the failure to torchrun too (hang.Watchdog.failing). An empty file; its mtime says when."""
    try:
        exchange.mkdir(parents=True, exist_ok=True)
        mark = exchange / f"{node}.failing"
        mark.touch()
        os.utime(mark, (since, since))
    except OSError:
        pass


def failing_marks(exchange: Path, exclude: str) -> list[float]:
    """When the other nodes' failing ranks raised (mark_failing)."""
    try:
        return [p.stat().st_mtime for p in exchange.glob("*.failing") if p.stem != exclude]
    except OSError:
        return []


def mark_starting(exchange: Path, node: str) -> None:
    """This node's ranks still start and work (their CPU grows, no collective completed yet): the other nodes'
    ranks waiting for them in init_process_group (or their first collective) wait on busy ranks. An empty file;
    its mtime says when it was last seen."""
    try:
        exchange.mkdir(parents=True, exist_ok=True)
        (exchange / f"{node}.starting").touch()
    except OSError:
        pass


def starting_marks(exchange: Path, exclude: str) -> dict[str, float]:
    """The other nodes' starting marks (mark_starting): node -> when last seen."""
    try:
        return {p.stem: p.stat().st_mtime for p in exchange.glob("*.starting") if p.stem != exclude}
    except OSError:
        return {}


def gather(exchange: Path, me: str, expected: int, wait_s: float) -> dict[str, dict[int, dict]]:
    """The other nodes' evidence, waiting up to ``wait_s`` for ``expected`` of them (their watchdogs fire on
    seeing this node's file); whatever has come by then."""
    end = time.monotonic() + wait_s
    while True:
        found = published(exchange, exclude=me)
        if len(found) >= expected or time.monotonic() >= end:
            break
        time.sleep(0.5)
    out = {}
    for path in found:
        try:
            doc = json.loads(job_files.read_text(path))
            out[doc["node"]] = {int(r): ev for r, ev in doc["evidence"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def with_the_others(exchange: Path, node: str, nnodes: int, evidence: dict[int, dict],
                    stop: bool) -> tuple[dict[int, dict], dict[str, list[int]]]:
    """This node's evidence published and the other nodes' gathered: (every rank's evidence, node -> its ranks).
    ``stop``: the job is being stopped, so the others are waited for; else it is already over (its own timeout
    ended it): their files as they are, briefly."""
    nodes = {node: sorted(evidence)}
    if nnodes < 2:
        return evidence, nodes
    publish(exchange, node, evidence)
    for other, theirs in gather(exchange, node, nnodes - 1, wait_s=15.0 if stop else 3.0).items():
        nodes[other] = sorted(theirs)
        evidence = {**theirs, **evidence}
    return evidence, nodes


def last_entries(fr: dict | None, keep: int) -> dict | None:
    """A flight record with only its newest ``keep`` entries: enough to see the collectives around a hang."""
    if not fr:
        return None
    return dict(fr, entries=(fr.get("entries") or [])[-keep:])
