"""A results directory's history as a SQLite index (the standard library's sqlite3): per result file and node, its
time, context, verdict, each check's level and each collective's bus bandwidth, refreshed from the files whose size
or mtime changed since the last read.

Why an index and not the JSON each time: a node check's record is about 20 KB (the checks' facts: packages, the
environment), so 10,000 runs are ~200 MB of JSON, many seconds to parse on 2 cores at every `ddpdoctor report
--history`; the index answers from a few MB in a fraction of a second and only the new runs are read. It holds
nothing the files do not (delete it and it is rebuilt), lives beside them (DIR/.ddpdoctor-history.sqlite), else in
~/.cache/ddpdoctor/ when DIR is not writable, else in memory.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..launchers.slurm_node import MAX_REASON  # a reason or summary is kept whole: what is broken is at its end
from ..registry import TOOL_ERROR
from ..unattended.node_check import MEETING  # the meeting's rows are named as its drain reasons name them

DB_NAME = ".ddpdoctor-history.sqlite"
SCHEMA_VERSION = 3  # 2: runs.action (the node check's drain or resume); 3: runs.reason, gaps, the meeting's rows
MAX_DEPTH = 3  # DIR/<node or run>/<file>.json, and one level more
MAX_FILES = 100_000  # the newest of more are read, and the page says how many were left out
BUSY_S = 5.0  # another report refreshing the index: waited for this long, then this one works in memory
LEVELS = ("pass", "skip", "warn", "fail")
TABLES = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, ok INTEGER);
CREATE TABLE IF NOT EXISTS runs(path TEXT, node TEXT, kind TEXT, run_id TEXT, created REAL, context TEXT,
                                verdict TEXT, action TEXT, reason TEXT, PRIMARY KEY(path, node));
CREATE TABLE IF NOT EXISTS levels(path TEXT, node TEXT, check_name TEXT, level TEXT, summary TEXT);
CREATE TABLE IF NOT EXISTS bandwidth(path TEXT, node TEXT, op TEXT, size INTEGER, busbw REAL);
CREATE TABLE IF NOT EXISTS gaps(path TEXT, node TEXT, what TEXT, why TEXT);
CREATE INDEX IF NOT EXISTS levels_path ON levels(path);
CREATE INDEX IF NOT EXISTS bandwidth_path ON bandwidth(path);
"""


@dataclass
class Run:
    """One node in one result file: what the history is made of."""

    path: str
    node: str
    kind: str
    run_id: str
    created: float
    context: str
    verdict: str
    action: str = ""  # the node check's drain or resume of this node, done ("" otherwise)
    reason: str = ""  # the drain's reason as scontrol was given it (whole: what is broken is at its end)
    levels: dict[str, tuple[str, str]] = field(default_factory=dict)  # check -> (level, first summary)
    bandwidth: dict[tuple[str, int], float] = field(default_factory=dict)  # (op, size) -> busbw GB/s
    gaps: list[tuple[str, str]] = field(default_factory=list)  # (what the node check could not do, why)


def scan(root: Path) -> tuple[list[tuple[str, int, int]], int]:
    """(relative path, size, mtime_ns) of the JSON files under ROOT (hidden ones and the index skipped), the newest
    MAX_FILES of them, and how many more there were."""
    found: list[tuple[str, int, int]] = []
    stack = [(str(root), 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            if e.name.startswith("."):
                continue
            if e.is_dir(follow_symlinks=False) and depth < MAX_DEPTH:
                stack.append((e.path, depth + 1))
            elif e.name.endswith(".json") and e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                found.append((os.path.relpath(e.path, root), st.st_size, st.st_mtime_ns))
    found.sort(key=lambda f: f[2], reverse=True)
    return found[:MAX_FILES], max(0, len(found) - MAX_FILES)


def connect(root: Path, beside: bool = True) -> sqlite3.Connection:
    """The index beside the results (``beside``: DIR is one this user may write in), else in the user's cache, else
    in memory (a read-only results folder). An index file is used only when this uid owns it and its schema is
    exactly ours (trusted.py); any other is rebuilt."""
    from .. import trust
    from ..errors import UsageError
    from .trusted import open_index

    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    try:  # as root, never in a folder another user can write: they could plant the index or a link
        trust.guard_dir(root, "--results-dir")
    except UsageError:  # the cache instead
        beside = False
    places = [root / DB_NAME] if beside else []
    for where in (*places, Path.home() / ".cache" / "ddpdoctor" / f"history-{digest}.sqlite"):
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            con = open_index(where, BUSY_S, TABLES)
            _ready(con)
            return con
        except (OSError, sqlite3.Error):
            continue
    return in_memory()


def in_memory() -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    _ready(con)
    return con


def _ready(con: sqlite3.Connection) -> None:
    con.executescript(TABLES)
    row = con.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None or row[0] != str(SCHEMA_VERSION):  # another version's index: rebuilt from the files
        for table in ("files", "runs", "levels", "bandwidth", "gaps"):
            con.execute(f"DROP TABLE IF EXISTS {table}")  # its columns may differ
        con.executescript(TABLES)
        con.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (str(SCHEMA_VERSION),))
        con.commit()


def refresh(con: sqlite3.Connection, root: Path, files: list[tuple[str, int, int]],
            progress: Callable[[int, int], None] | None = None) -> dict:
    """Bring the index up to date with ``files``: new or changed files read, vanished ones dropped."""
    known = {p: (s, m) for p, s, m in con.execute("SELECT path, size, mtime_ns FROM files")}
    current = {p: (s, m) for p, s, m in files}
    gone = [p for p in known if p not in current]
    todo = [(p, s, m) for p, s, m in files if known.get(p) != (s, m)]
    for p in gone + [t[0] for t in todo]:
        _forget(con, p)
    unreadable = 0
    for i, (rel, size, mtime) in enumerate(todo, start=1):
        rows = summarise(root / rel, rel)
        unreadable += rows is None
        con.execute("INSERT OR REPLACE INTO files VALUES(?,?,?,?)", (rel, size, mtime, int(rows is not None)))
        for run in rows or ():
            _insert(con, run)
        if progress and (i % 500 == 0 or i == len(todo)):
            progress(i, len(todo))
    con.commit()
    bad = con.execute("SELECT COUNT(*) FROM files WHERE ok=0").fetchone()[0]
    return {"files": len(files), "read": len(todo), "removed": len(gone), "unreadable": bad,
            "unreadable_now": unreadable}


def _forget(con: sqlite3.Connection, path: str) -> None:
    for table in ("files", "runs", "levels", "bandwidth", "gaps"):
        con.execute(f"DELETE FROM {table} WHERE path=?", (path,))


def _insert(con: sqlite3.Connection, run: Run) -> None:
    con.execute("INSERT OR REPLACE INTO runs VALUES(?,?,?,?,?,?,?,?,?)",
                (run.path, run.node, run.kind, run.run_id, run.created, run.context, run.verdict, run.action,
                 run.reason))
    con.executemany("INSERT INTO gaps VALUES(?,?,?,?)", [(run.path, run.node, w, y) for w, y in run.gaps])
    con.executemany("INSERT INTO levels VALUES(?,?,?,?,?)",
                    [(run.path, run.node, c, lv, s) for c, (lv, s) in run.levels.items()])
    con.executemany("INSERT INTO bandwidth VALUES(?,?,?,?,?)",
                    [(run.path, run.node, op, size, bw) for (op, size), bw in run.bandwidth.items()])


def summarise(path: Path, rel: str) -> list[Run] | None:
    """The runs one file holds (a preflight: one per node it judged; nccl-bench: one for its hosts together), or
    None when it is not a readable ddpdoctor result (a user's own JSON, a truncated file)."""
    from ..errors import UsageError
    from ..inputs import load_json_file

    try:
        doc = load_json_file(path)
    except (UsageError, OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != "ddpdoctor":
        return None
    from .trusted import storable

    try:
        if doc.get("kind") == "preflight":
            return storable(list(_preflight_runs(doc, rel)))
        if doc.get("kind") == "nccl-bench":
            return storable([_bench_run(doc, rel)])
    except (TypeError, ValueError, AttributeError, OverflowError, OSError):  # created in year 1 with an offset
        return None
    return []


def _created(doc: dict) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(str(doc.get("created"))).timestamp()


def _action(nc: dict) -> str:
    """The node check's drain or resume, when scontrol did it."""
    done = nc.get("scontrol") if isinstance(nc.get("scontrol"), dict) else {}
    return str(nc.get("action")) if nc.get("action") in ("drain", "resume") and done.get("ok") else ""


def _preflight_runs(doc: dict, rel: str) -> Iterator[Run]:
    nc = doc.get("node_check") if isinstance(doc.get("node_check"), dict) else {}
    context = str(nc.get("context") or "preflight")
    nodes = [str(n) for n in (doc.get("nodes") or {})]
    for node in nodes:
        run = Run(rel, node, "preflight", str(doc.get("run_id")), _created(doc), context, "pass", _action(nc))
        run.reason = str(nc.get("reason") or "")[:MAX_REASON] if run.action == "drain" else ""
        for check, r in _results(doc, nc, node):
            level = r["level"]
            if check not in run.levels or LEVELS.index(level) > LEVELS.index(run.levels[check][0]):
                run.levels[check] = (level, str(r.get("summary", ""))[:MAX_REASON])
        run.gaps = gaps(doc, nc)
        worst = max((LEVELS.index(lv) for lv, _ in run.levels.values()), default=0)
        run.verdict = "pass" if LEVELS[worst] == "skip" else LEVELS[worst]
        yield run


def _results(doc: dict, nc: dict, node: str) -> Iterator[tuple[str, dict]]:
    """(the row's name, the result) of each result for ``node``: the run's own, and the job's nodes' meeting's as
    rows of their own ('clock-skew [meeting]', as the drain reason names them), a meeting check with no failing
    result for this node passing, one that was skipped skipping."""
    for r in doc.get("results") or []:
        if isinstance(r, dict) and r.get("level") in LEVELS and not (r.get("nodes") and node not in r["nodes"]):
            yield str(r.get("check")), r
    met = nc.get("cross_node") if isinstance(nc.get("cross_node"), dict) else {}
    if met.get("verdict") is None:
        return
    for r in met.get("results") or []:
        if isinstance(r, dict) and r.get("level") in LEVELS and (r.get("level") == "skip" or node in (r.get("nodes")
                                                                                                    or [])):
            yield f"{r.get('check')} [{MEETING}]", r
    for check in met.get("checks") or []:
        yield f"{check} [{MEETING}]", {"level": "pass", "summary": ""}


def gaps(doc: dict, nc: dict) -> list[tuple[str, str]]:
    """What the node check could not do in this run, and why: its meeting of the job's nodes skipped (not for a
    one-node job), records it could not keep before this one (carried in node_check.records_not_kept), a check
    whose own gather failed (the tool's error, never a drain), the kept facts it could not write."""
    out = []
    met = nc.get("cross_node") if isinstance(nc.get("cross_node"), dict) else {}
    if met.get("skipped") and met.get("needed") is not False:
        out.append(("meeting skipped", str(met["skipped"])[:MAX_REASON]))
    unkept = nc.get("records_not_kept") if isinstance(nc.get("records_not_kept"), dict) else {}
    if unkept.get("count"):
        out.append((f"{unkept['count']} record(s) not kept before this one",
                    f"since {unkept.get('since') or '?'}: {unkept.get('why') or '?'}"[:MAX_REASON]))
    for r in doc.get("results") or []:
        if isinstance(r, dict) and (r.get("details") or {}).get(TOOL_ERROR):
            out.append((f"{r.get('check')} could not run", str(r.get("summary") or "")[:MAX_REASON]))
    if nc.get("kept_facts_not_written"):
        out.append(("kept facts not written", str(nc["kept_facts_not_written"])[:MAX_REASON]))
    return out


def _bench_run(doc: dict, rel: str) -> Run:
    from ..grouping import compress_hosts

    hosts = doc.get("hosts") or {}
    names = hosts.values() if isinstance(hosts, dict) else hosts
    node = compress_hosts(str(h) for h in names) or "?"
    run = Run(rel, node, "nccl-bench", str(doc.get("run_id")), _created(doc), "nccl-bench",
              str(doc.get("verdict") or "pass"))
    for row in doc.get("rows") or []:
        best = [((row.get(p) or {}).get("busbw_gbs")) for p in ("out_of_place", "in_place")]
        best = [b for b in best if isinstance(b, (int, float)) and not isinstance(b, bool)]
        if best and isinstance(row.get("size"), int):
            run.bandwidth[(str(row.get("op")), row["size"])] = max(best)
    return run


def runs(con: sqlite3.Connection) -> list[Run]:
    """Every indexed run, oldest first, with its levels and bandwidths."""
    out = {(p, n): Run(p, n, k, r, c, ctx, v, a or "", why or "") for p, n, k, r, c, ctx, v, a, why in
           con.execute("SELECT path, node, kind, run_id, created, context, verdict, action, reason FROM runs")}
    for p, n, what, why in con.execute("SELECT path, node, what, why FROM gaps"):
        if (p, n) in out:
            out[(p, n)].gaps.append((what, why))
    for p, n, check, level, summary in con.execute("SELECT path, node, check_name, level, summary FROM levels"):
        if (p, n) in out:
            out[(p, n)].levels[check] = (level, summary)
    for p, n, op, size, bw in con.execute("SELECT path, node, op, size, busbw FROM bandwidth"):
        if (p, n) in out:
            out[(p, n)].bandwidth[(op, size)] = bw
    return sorted(out.values(), key=lambda r: (r.created, r.path))
