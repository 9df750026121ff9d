"""The worker's call log (launch/calls_log.py: send/recv with their peers, all_to_all_single with its splits,
written as each call is made) -> each rank's calls, in order. run-trainer only: plain torchrun has no log."""
from __future__ import annotations

import json
from pathlib import Path

from ...numbers import parse_int
from .. import evidence_io
from .model import DEFAULT_GROUP, Call, Frame, RankState, Source

TAIL_BYTES = 1 << 20   # the last MiB of a rank's log: its newest calls
KEEP = 400             # calls kept per rank


def _frame(where) -> Frame | None:
    if not isinstance(where, str) or ":" not in where:
        return None
    file, _, line = where[:4096].rpartition(":")
    n = parse_int(line, hi=10**9)
    return Frame(file, n, "?") if n is not None else None


def _sizes(v) -> tuple:
    return tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else ()


def _splits(rec: dict) -> tuple | None:
    ins, outs = rec.get("in_splits"), rec.get("out_splits")
    ok = all(x is None or (isinstance(x, list) and all(isinstance(i, int) for i in x)) for x in (ins, outs))
    return (tuple(ins) if ins else None, tuple(outs) if outs else None) if ok else None


def rank_calls(path: Path) -> tuple[Call, ...]:
    """One rank's logged calls, oldest first (a line that is not a call is skipped)."""
    out = []
    for line in evidence_io.read_tail(path, TAIL_BYTES).splitlines()[-KEEP:]:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("op"), str):
            continue
        peer = rec.get("peer") if isinstance(rec.get("peer"), int) and not isinstance(rec.get("peer"), bool) else None
        out.append(Call(DEFAULT_GROUP, rec["op"][:64], peer=peer, input_sizes=_sizes(rec.get("sizes")),
                        output_sizes=_sizes(rec.get("out_sizes")), dtypes=(str(rec.get("dtype"))[:64],),
                        splits=_splits(rec), site=_frame(rec.get("where"))))
    return tuple(out)


def from_dir(folder: Path, ranks: list[int] | None = None) -> list[RankState]:
    """Every rank's call log under ``folder`` (rank<R>.jsonl)."""
    out = []
    try:
        paths = sorted(folder.glob("rank*.jsonl"))[:4096]
    except OSError:
        return []
    for path in paths:
        rank = parse_int(path.name[4:-6], hi=1 << 20)
        if rank is None or (ranks is not None and rank not in ranks):
            continue
        calls = rank_calls(path)
        if calls:
            out.append(RankState(rank, Source.CALL_LOG, calls=calls))
    return out
