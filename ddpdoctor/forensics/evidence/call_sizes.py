"""The sizes each rank passed to its point-to-point and all-to-all calls: the file format and its reader.

Who sent a message of the wrong size is in no log and no flight record (gloo records neither send/recv nor
all-to-all splits; it aborts the *receiver*, whose message names no peer). run-trainer's bootstrap observes
these calls from outside the library (launch/size_watch.py: sys.monitoring, Python 3.12+, no function
replaced) and keeps each rank's last calls in a small file mapped into the rank's memory: the kernel keeps what
was written even when gloo aborts the process a moment later.

The file is SLOTS fixed slots of SLOT bytes, written round-robin, each one call as JSON ended by a NUL byte (what
follows it is an older call's rest):
``{"n": sequence in this rank, "op": "send" | "recv" | "all_to_all", "group": [global ranks] | null (the world),
"k": the call's number on its channel (per peer for send/recv, per group for all_to_all), "peer": global rank |
null, "bytes": per peer in group order (all_to_all) or the message's bytes, "expects": (all_to_all) per peer, the
bytes it expects, "shape": the tensors' sizes as the rank passed them, "dtype", "splits": (all_to_all_single)
the input and output split sizes as passed (null: even),
"where": the script's file:line, "t": wall-clock time}``. A slot torn by a crash does not parse and is skipped.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import job_files

SLOTS = 128
SLOT = 1024
FOLDER = "call_sizes"  # beside flight_recorder/ in a run's records
OPS = ("send", "recv", "all_to_all")
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # one, reused: the watch encodes on every call
NAME = re.compile(r"rank(\d{1,9})\.calls")


@dataclass(frozen=True)
class Call:
    rank: int
    n: int
    op: str
    k: int
    group: tuple[int, ...] | None
    peer: int | None
    sizes: tuple[int, ...]  # bytes: one entry for send/recv, one per group member for all_to_all (in group order)
    expects: tuple[int, ...]  # all_to_all: the bytes it expects from each member; send/recv: ()
    shape: str
    where: str | None
    t: float = 0.0


def file_name(rank: int | str) -> str:
    return f"rank{rank}.calls"


def encode(record: dict) -> bytes | None:
    """One call's slot, NUL-ended, or None when it does not fit (a huge group): such a call is not kept."""
    raw = _ENCODER.encode(record).encode() + b"\0"
    return raw if len(raw) <= SLOT else None


def read_rank(path: Path, rank: int) -> list[Call]:
    """One rank's kept calls, oldest first. A file that is no regular file of the expected size, a link, or a
    slot that does not parse is skipped: the file came from the job (as root, not trusted)."""
    raw = job_files.read_capped(path, SLOTS * SLOT)
    if not raw:
        return []
    calls = []
    for i in range(0, len(raw) - SLOT + 1, SLOT):
        call = _decode(raw[i:i + SLOT].split(b"\0", 1)[0], rank)
        if call is not None:
            calls.append(call)
    return sorted(calls, key=lambda c: c.n)


def read_dir(folder: Path) -> dict[int, list[Call]]:
    """Every rank's calls in a run's call_sizes/ folder, by global rank."""
    out: dict[int, list[Call]] = {}
    for rank, path in _files(folder):
        calls = read_rank(path, rank)
        if calls:
            out[rank] = calls
    return out


def _files(folder: Path, limit: int = 4096) -> list[tuple[int, Path]]:
    """(rank, path) of the rank<R>.calls files, at most ``limit`` entries looked at."""
    out = []
    try:
        with os.scandir(folder) as it:
            for i, entry in enumerate(it):
                if i >= limit:
                    break
                m = NAME.fullmatch(entry.name)
                if m:
                    out.append((int(m.group(1)), Path(entry.path)))
    except OSError:
        return []
    return sorted(out)


def _decode(raw: bytes, rank: int) -> Call | None:
    if not raw:
        return None
    try:
        rec = json.loads(raw)
        op = rec["op"]
        if op not in OPS:
            return None
        group = rec.get("group")
        return Call(rank=rank, n=int(rec["n"]), op=op, k=int(rec["k"]),
                    group=tuple(int(r) for r in group) if group is not None else None,
                    peer=int(rec["peer"]) if rec.get("peer") is not None else None,
                    sizes=tuple(int(b) for b in rec["bytes"]),
                    expects=tuple(int(b) for b in rec.get("expects") or ()),
                    shape=_shape(rec), where=_where(rec.get("where")),
                    t=float(rec.get("t") or 0.0))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _shape(rec: dict) -> str:
    """The call's tensors as a person reads them: (4, 32) float32; in (7,) splits [3, 2, 2], out (6,) even."""
    shape, dtype, splits = rec.get("shape") or [], str(rec.get("dtype") or ""), rec.get("splits")
    if rec["op"] != "all_to_all":
        return f"{_dims(shape[0]) if shape else '?'} {dtype}".strip()[:300]
    if splits is not None and len(shape) == 2:
        return (f"in {_dims(shape[0])} splits {_splits(splits[0])}, out {_dims(shape[1])} splits "
                f"{_splits(splits[1])} {dtype}")[:300]
    return f"in {shape[0]!s}, out {shape[1]!s} {dtype}"[:300] if len(shape) == 2 else dtype


def _dims(dims) -> str:
    return str(tuple(int(d) for d in dims))


def _splits(splits) -> str:
    return str([int(s) for s in splits]) if splits else "even"


def _where(value) -> str | None:
    return str(value)[:500] if isinstance(value, str) and value else None
