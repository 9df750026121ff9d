"""What the history index trusts: an index file this uid owns whose schema is exactly ours (no view, no trigger, no
other column: a planted ``files`` VIEW over an endless recursive CTE, or a TRIGGER inserting millions of rows, would
run inside the report), read with ``PRAGMA trusted_schema=OFF``; and only rows SQLite can store as they are (a
value out of SQLite's range or a lone surrogate makes its file unreadable, counted on the page, never exit 4).

Any other index is removed and rebuilt: it is a cache of the result files (index.py), never the record.
"""
from __future__ import annotations

import math
import os
import sqlite3
import stat
from functools import lru_cache
from pathlib import Path

SIDECARS = ("", "-journal", "-wal", "-shm")  # a planted hot journal would be rolled back into the index
INT64 = 1 << 63
# The times a page can write back as a UTC date: a day inside datetime's years 1-9999 (year 1 at +05:00 is year 0 UTC).
EPOCHS = (-62135510400.0, 253402214400.0)


@lru_cache(maxsize=2)
def expected_schema(tables: str) -> frozenset:
    """sqlite_master as ``tables`` (index.TABLES) makes it, in a fresh in-memory database."""
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(tables)
        return frozenset(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    finally:
        con.close()


def _foreign(st: os.stat_result) -> bool:
    return not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()


def _drop_foreign_files(where: Path) -> None:
    """The index and its journals: any that is a link, not a regular file or another uid's is removed (OSError when
    it cannot be: the caller looks elsewhere)."""
    for suffix in SIDECARS:
        path = Path(f"{where}{suffix}")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if _foreign(st):
            path.unlink()


def _remove(where: Path) -> None:
    for suffix in SIDECARS:
        Path(f"{where}{suffix}").unlink(missing_ok=True)


def _connect(where: Path, busy_s: float) -> sqlite3.Connection:
    con = sqlite3.connect(str(where), timeout=busy_s)
    con.execute("PRAGMA trusted_schema=OFF")  # no SQL function with side effects from the schema, ever
    return con


def _ours(con: sqlite3.Connection, tables: str) -> bool:
    found = frozenset(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    return not found or found == expected_schema(tables)


def open_index(where: Path, busy_s: float, tables: str) -> sqlite3.Connection:
    """A connection to the index at ``where``, rebuilt empty unless it is this uid's and exactly what ``tables``
    (index.TABLES) makes."""
    _drop_foreign_files(where)
    con = _connect(where, busy_s)
    try:
        if _ours(con, tables):
            return con
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            con.close()
            raise
    except sqlite3.DatabaseError:  # not a database at all
        pass
    con.close()
    _remove(where)
    return _connect(where, busy_s)


def _text_ok(*values) -> None:
    for v in values:
        v.encode("utf-8")  # UnicodeEncodeError (a ValueError) on a lone surrogate


def storable(runs: list) -> list:
    """``runs`` when SQLite stores every value as it is; ValueError otherwise (NaN is stored as NULL, an int past
    64 bits overflows, a lone surrogate cannot be encoded, a time out of range compares as nothing)."""
    for run in runs:
        _text_ok(run.path, run.node, run.kind, run.run_id, run.context, run.verdict)
        if not EPOCHS[0] <= run.created <= EPOCHS[1]:  # NaN included
            raise ValueError("created is out of range")
        for check, (level, summary) in run.levels.items():
            _text_ok(check, level, summary)
        for (op, size), busbw in run.bandwidth.items():
            _text_ok(op)
            if not -INT64 <= size < INT64 or not math.isfinite(busbw):
                raise ValueError(f"{op} at {size}: out of range")
    return runs
