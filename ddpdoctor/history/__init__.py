"""A results directory's history, node by node (`ddpdoctor report --history`): index.py keeps a SQLite index of the
result files (read once each), trends.py judges each node's runs (flapping checks, bandwidth over runs, a node
slower than its own past). ``collect`` is the entry; report/views/history.py words and draws the result."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Callable

from ..errors import UsageError


def collect(root: Path, progress: Callable[[int, int], None] | None = None) -> dict:
    """Every node's history under ROOT (its folders of results, any depth up to three)."""
    from .index import connect, in_memory, refresh, runs, scan
    from .trends import history

    if not root.is_dir():
        raise UsageError(f"{root}: no such directory of results (--results-dir: where the node check or the "
                         "commands keep their JSON)")
    files, left_out = scan(root)
    con = connect(root)
    try:
        try:
            stats = refresh(con, root, files, progress)
            found = runs(con)
        except sqlite3.OperationalError:  # another report holds the index past BUSY_S: this one works in memory
            con.close()
            con = in_memory()
            stats = refresh(con, root, files, progress)
            found = runs(con)
        data = history(found)
    finally:
        con.close()
    if not data["runs"]:
        raise UsageError(f"no preflight or nccl-bench results under {root} ({len(files)} JSON file(s) read): "
                         "nothing to show a history of")
    data.update(root=str(root), files=len(files), left_out=left_out, unreadable=stats["unreadable"],
                read=stats["read"])
    return data
