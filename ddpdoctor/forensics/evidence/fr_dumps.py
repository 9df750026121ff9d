"""Flight-recorder dump files left by a job: found under a log dir, read safely, judged like a live hang.

torch writes them on a collective timeout (``TORCH_FR_DUMP_TEMP_FILE``, default ``/tmp/nccl_trace_rank_<R>``,
pickled) or on request (``_dump_fr_trace_json``, JSON; run-trainer's bootstrap writes ``rank<R>.json``). A
pickle from a log dir is data a user hands us, not code: it is read with an unpickler that builds only
plain containers and scalars, so a crafted file cannot run anything.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ...numbers import parse_int
from . import job_files

MAX_BYTES = job_files.DUMP_BYTES  # per file: a flight record of a few thousand entries is a few MiB
# nccl_trace_rank_3, rank3.json, and torch's own TORCH_FR_DUMP_TEMP_FILE naming: <prefix><rank>, e.g. rank_3
RANK_IN_NAME = re.compile(r"(?:trace_rank_|rank_?)(\d{1,6})(?:\.json)?$")
_PlainUnpickler = job_files.PlainUnpickler  # the name tests and callers know


def read_dump(path: Path) -> dict | None:
    """One dump as a dict, or None when it is not a readable flight record (not a regular file, too big, not
    JSON/pickle, a memo or nesting bomb, the wrong shape): each refusal is a note, never an exception."""
    raw = job_files.read_capped(Path(path), MAX_BYTES)
    return None if raw is None else parse_dump(raw, str(path))


def parse_dump(raw: bytes, name: str) -> dict | None:
    """A dump's bytes (JSON, or a pickle read as data) as a flight record, or None with a note (read_dump's
    bounds; attach reads the bytes with the job's rights and hands them here)."""
    if raw[:1] in (b"{", b"["):
        data = job_files.loads_bounded(raw, name)
    else:
        data = job_files.load_plain_pickle(raw, name)
    if data is None or not job_files.tree_fits(data, name):
        return None
    return plain_record(data, name)


def plain_record(data, name: str) -> dict | None:
    """The fields the judge reads, each of the type it expects; a dump of another shape is None with a note.
    `entries`: a list of dicts; `pg_status`: a dict of dicts; an entry's numbers are ints, its frames dicts
    with a file, an integer line and a name."""
    if not isinstance(data, dict) or ("entries" not in data and "pg_status" not in data):
        job_files.note(f"skipped {name}: not a flight record (no entries or pg_status)")
        return None
    out = dict(data)
    entries = data.get("entries")
    status = data.get("pg_status")
    out["entries"] = [_entry(e) for e in entries if isinstance(e, dict)] if isinstance(entries, (list, tuple)) else []
    out["pg_status"] = ({str(k): v for k, v in status.items() if isinstance(v, dict)} if isinstance(status, dict)
                        else {})
    if not out["entries"] and not out["pg_status"] and (entries or status):
        job_files.note(f"skipped {name}: entries/pg_status of the wrong shape")
        return None
    out["ended"] = _ended(data.get("ended"))
    return out


def _ended(raw) -> dict | None:
    """The bootstrap's note of a script that ended of its own: {"exit_code": int, "where": "file:line" | None}."""
    if not isinstance(raw, dict) or not _intlike(raw.get("exit_code")):
        return None
    where = raw.get("where")
    return {"exit_code": int(raw["exit_code"]), "where": where[:1000] if isinstance(where, str) else None}


def _entry(e: dict) -> dict:
    out = dict(e)
    for key in ("collective_seq_id", "pg_id", "time_created_ns", "p2p_seq_id"):
        if key in out and not _intlike(out[key]):
            del out[key]
    if "process_group" in out and not (isinstance(out["process_group"], (list, tuple)) and out["process_group"]):
        del out["process_group"]
    frames = out.get("frames")
    out["frames"] = [f for f in frames if isinstance(f, dict) and _intlike(f.get("line", 0))] \
        if isinstance(frames, (list, tuple)) else []
    if not isinstance(out.get("profiling_name", ""), str):
        out["profiling_name"] = str(out["profiling_name"])[:200]
    return out


def _intlike(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return parse_int(v, lo=None, signed=True, strip=False) is not None


MAX_DEPTH = 16  # folders below a log dir searched for dumps (torchrun's own layout is 3 deep)


def find_dumps(roots: list[Path], limit: int = 4096) -> dict[int, tuple[Path, dict]]:
    """Rank -> (file, flight record) for every readable dump under the roots (bounded in count: at most
    ``limit`` dumps and ``limit`` x 8 directory entries looked at; links are not followed)."""
    candidates: list[tuple[int, Path]] = []
    seen = 0
    for root in roots:
        if not root.is_dir():
            continue
        top = len(root.parts)
        for folder, dirs, files in os.walk(root):  # followlinks=False: a link cannot lead the walk elsewhere
            dirs.sort()
            if len(Path(folder).parts) - top >= MAX_DEPTH and dirs:  # 3000 nested folders: no RecursionError
                job_files.note(f"{folder}: deeper than {MAX_DEPTH} folders below {root}; not searched further")
                dirs.clear()
            seen += len(dirs) + len(files)
            for name in sorted(files):
                m = RANK_IN_NAME.search(name)
                if m:
                    candidates.append((int(m.group(1)), Path(folder) / name))
            if seen > limit * 8:
                job_files.note(f"{root}: more than {limit * 8} files; the rest not searched for dumps")
                break
    found: dict[int, tuple[Path, dict]] = {}
    for rank, path in candidates:
        if rank in found:
            continue
        fr = read_dump(path)
        if fr is not None:
            found[rank] = (path, fr)
            if len(found) >= limit:
                break
    return found


def job_ranks(dumps: dict[int, tuple[Path, dict]], limit: int = 1 << 16) -> list[int]:
    """Every rank of the job, from the largest process group the dumps describe (pg_config's ``ranks``, a
    string such as "[0, 1, 2]"); only the ranks found when that says nothing usable."""
    best: list[int] = []
    for _, fr in dumps.values():
        for cfg in (fr.get("pg_config") or {}).values() if isinstance(fr.get("pg_config"), dict) else []:
            raw = cfg.get("ranks") if isinstance(cfg, dict) else None
            try:
                ranks = json.loads(raw) if isinstance(raw, str) and len(raw) < 8 * limit else raw
            except ValueError:
                continue
            if isinstance(ranks, list) and len(ranks) <= limit and all(isinstance(r, int) for r in ranks) \
                    and len(ranks) > len(best):
                best = ranks
    return sorted(set(best) | set(dumps))


def pg_timeouts_s(dumps: dict[int, tuple[Path, dict]]) -> list[float]:
    """The process-group timeouts the ranks' collectives ran under (every entry's ``timeout_ms``), in seconds,
    largest first: which timeout the job, or a library inside it, kept (HF Trainer on the CPU drops
    ``ddp_timeout``; DeepSpeed's own group keeps 30 minutes)."""
    found: set[float] = set()
    for _, (_, fr) in dumps.items():
        for e in (fr.get("entries") or [])[-64:] if isinstance(fr, dict) else []:
            ms = parse_int(e.get("timeout_ms") if isinstance(e, dict) else None, lo=1, hi=10**12)
            if ms is not None:
                found.add(ms / 1000.0)
    return sorted(found, reverse=True)


def stalled_s(dumps: dict[int, tuple[Path, dict]]) -> float | None:
    """How long the oldest collective still pending in any dump had waited when its dump was written (the
    file's time: the bootstrap writes it at the launcher's or a scheduler's SIGTERM, torch on a timeout); None
    when no dump holds a pending collective. A healthy collective completes in milliseconds."""
    from .worker_client import pending_deadline

    out = None
    for _, (path, fr) in dumps.items():
        pending = pending_deadline(fr)
        if pending is None:
            continue
        try:
            written = path.stat().st_mtime
        except OSError:
            continue
        waited = written - (pending[0] - pending[1])
        out = waited if out is None else max(out, waited)
    return out
