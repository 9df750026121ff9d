"""What a run leaves on disk besides torch's logs: partial-write temp files to remove, and how the run started
(fresh, or resumed from an earlier run's snapshot)."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import psutil

from ..forensics.evidence import job_files

# `.latest.pt.tmp<pid>` (snapshots), `corpus.tmp<pid>` (data), `.run.json.<pid>.tmp` (documents),
# `rank<R>.json.<pid>.tmp` (a rank's flight record at exit).
TEMP = re.compile(r"\.tmp(\d+)$|\.(\d+)\.tmp$")
# A writer that is alive keeps touching its file; one untouched this long whose pid is gone here is debris.
STALE_S = 60.0


def temp_files(root: Path, run: str = "*") -> list[Path]:
    """Temp files under a --run-dir: of every run (and the shared corpus), or of one run."""
    found = []
    patterns = [f"{run}/snapshots/.*tmp*", f"{run}/.*.tmp", f"{run}/flight_recorder/*.tmp"] + (
        [".data/*.tmp*", ".*.tmp"] if run == "*" else [])
    for pattern in patterns:
        found += [p for p in root.glob(pattern) if p.is_file() and TEMP.search(p.name)]
    return found


def clean_temps(root: Path, stale_s: float = STALE_S, run: str = "*") -> list[Path]:
    """Remove temp files of writers that are gone: a SIGKILLed rank 0 mid-snapshot, a crashed earlier run.
    On a shared run dir the pid may be another node's, hence the age test as well."""
    removed = []
    now = time.time()
    for path in temp_files(root, run):
        m = TEMP.search(path.name)
        pid = int(m.group(1) or m.group(2))
        try:
            fresh = stale_s > 0 and now - path.stat().st_mtime < stale_s
        except OSError:
            continue
        if fresh or (pid != os.getpid() and psutil.pid_exists(pid)):
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def start_info(records: Path, resumed_run: str | None) -> dict:
    """{"fresh": True} or where the run started from, as the trainer recorded it when it loaded the snapshot."""
    try:
        data = json.loads(job_files.read_text(records / "resumed.json", job_files.ERROR_FILE_BYTES))
    except (OSError, ValueError):
        data = None
    if not resumed_run:
        return {"fresh": True}
    return {"fresh": False, "from_run": resumed_run, "step": (data or {}).get("step"),
            "snapshot": (data or {}).get("snapshot")}


def node_of(logs: Path) -> dict | None:
    """This node's place in the job as its local rank 0 recorded it (bootstrap.record_node_rank):
    {"node_rank", "nnodes", "master_addr"}, plus, when the run dir is shared, "master_logs": the log dir of
    node rank 0. None when no worker started (a failed rendezvous): then every node shows its full result."""
    from ..forensics.evidence.job_files import subdirs
    from .torchrun import NODE_FILE

    mine = _node_file(logs / NODE_FILE)
    if mine is None:
        return None
    if mine["node_rank"] != 0:
        for other in subdirs(logs.parent):
            theirs = _node_file(other / NODE_FILE) if other != logs else None
            if theirs is not None and theirs["node_rank"] == 0:
                mine["master_logs"] = str(other.resolve())
                break
    return mine


def _node_file(path: Path) -> dict | None:
    from ..forensics.evidence.job_files import read_capped

    try:
        raw = read_capped(path, 4096)  # never blocks on a FIFO, never reads a huge file
        if raw is None:
            return None
        data = json.loads(raw)
        rank = data["node_rank"]
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            return None
        return {"node_rank": rank, "nnodes": data.get("nnodes") if isinstance(data.get("nnodes"), int) else None,
                "master_addr": data.get("master_addr") if isinstance(data.get("master_addr"), str) else None}
    except (OSError, ValueError, KeyError, TypeError):
        return None
