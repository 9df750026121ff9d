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
# Where a dump's name says its rank, most explicit first: nccl_trace_rank_3, rank3.json, rank_3 (torch's
# <TORCH_FR_DUMP_TEMP_FILE><rank>), torchcomms' comm_lib_trace_rank_3, a host part anywhere (node7_rank_3,
# nccl_trace_rank_3.node7), NVIDIA resiliency's <prefix>_dump_3; else the digits that end the name
# (TORCH_FR_DUMP_TEMP_FILE=/logs/fr_ -> fr_3). A candidate is only a dump once its content reads as one.
RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?(\d{1,6})(?=$|[^0-9])", re.I)
DUMP_IN_NAME = re.compile(r"_dump_(\d{1,6})(?=$|[^0-9])")
TRAILING_RANK = re.compile(r"(?:^|[^0-9])(\d{1,6})$")
DUMP_SUFFIXES = ("", ".json", ".pkl", ".pickle", ".bin")
# other files a run's folders hold beside the dumps (a host part after the rank, rank_3.node7, is no suffix)
NOT_DUMPS = (".calls", ".jsonl", ".log", ".txt", ".out", ".err", ".py", ".html", ".csv", ".prom", ".lock", ".pid",
             ".tmp")
KNOWN_VERSIONS = ("2.10",)  # the writer's `version` in torch 2.13, 2.14.1 and 2.15.0 (torchcomms' hook too)
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
                rank = rank_of_name(name)
                if rank is not None:
                    candidates.append((rank, Path(folder) / name))
            if seen > limit * 8:
                job_files.note(f"{root}: more than {limit * 8} files; the rest not searched for dumps")
                break
    found: dict[int, tuple[Path, dict]] = {}
    for rank, path in sorted(candidates, key=lambda c: _explicit(c[1].name)):  # rank3.json before a stray `fr_3`
        if rank in found:
            continue
        fr = read_dump(path)
        if fr is not None:
            found[rank] = (path, fr)
            _say_version(path, fr)
            if len(found) >= limit:
                break
    return found


def rank_of_name(name: str) -> int | None:
    """The rank a file's name gives it as a flight-recorder dump, or None (RANK_IN_NAME's order)."""
    if name.lower().endswith(NOT_DUMPS):
        return None
    stem = name
    for suffix in sorted(DUMP_SUFFIXES, key=len, reverse=True):
        if suffix and name.lower().endswith(suffix):
            stem = name[:-len(suffix)]
            break
    else:
        if "." in name and not RANK_IN_NAME.search(name):
            return None  # train.log.3, rank0.calls: another file's suffix
    if stem != name and not stem:
        return None
    for pattern in (RANK_IN_NAME, DUMP_IN_NAME):
        found = pattern.findall(stem)
        if found:
            return int(found[-1])
    if "." in stem:
        return None
    m = TRAILING_RANK.search(stem)
    return int(m.group(1)) if m else None


def _explicit(name: str) -> int:
    return 0 if RANK_IN_NAME.search(name) or DUMP_IN_NAME.search(name) else 1


def version_of(fr: dict) -> str | None:
    """The dump's ``version`` as written, or None when it has none."""
    v = fr.get("version")
    return str(v)[:20] if v is not None else None


def unknown_version(fr: dict) -> bool:
    """A dump whose format version ddpdoctor was not built against (read as 2.10: the fields it reads)."""
    v = version_of(fr)
    return v is not None and v not in KNOWN_VERSIONS


def _say_version(path: Path, fr: dict) -> None:
    if unknown_version(fr):
        job_files.note(f"{path}: flight-record version {version_of(fr)!r}, not one ddpdoctor knows "
                       f"({', '.join(KNOWN_VERSIONS)}); read as {KNOWN_VERSIONS[-1]}: a field it renamed is not seen")


def missing_dumps(dumps: dict[int, tuple[Path, dict]]) -> list[int]:
    """The job's ranks (pg_config's) that left no dump: evidence too (pytorch#196968: a rank already in
    destroy_process_group(), dead or hung hard cannot answer the dump request or write its file)."""
    return [r for r in job_ranks(dumps) if r not in dumps] if dumps else []


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


def dump_clock_s(fr: dict) -> float | None:
    """The latest time the dump itself knows (epoch seconds): the newest of its entries' ``time_created_ns``,
    ``time_discovered_started_ns`` and ``time_discovered_completed_ns`` (0: not seen). None without any."""
    best = 0
    for e in fr.get("entries") or []:
        for key in ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"):
            ns = parse_int(e.get(key), lo=1, hi=1 << 62) if isinstance(e, dict) else None
            if ns is not None and ns > best:
                best = ns
    return best / 1e9 if best else None


def stalled_s(dumps: dict[int, tuple[Path, dict]]) -> float | None:
    """How long the oldest collective still pending in any dump had waited when its dump was written; None
    when no dump holds a pending collective. A healthy collective completes in milliseconds.

    The file's time is when it was written (the bootstrap writes it at the launcher's or a scheduler's SIGTERM,
    torch on a timeout), but only while it is plausible: after the collective was created and not past its
    timeout by more than DUMP_LATE_S (a dump copied, touched or restored later says nothing of the wait). Else
    the dumps' own clock: the newest event any rank's dump recorded (a lower bound: the wait went on after it)."""
    from .worker_client import pending_deadline

    clock = max((c for c in (dump_clock_s(fr) for _, (_, fr) in dumps.items()) if c is not None), default=None)
    out = None
    for _, (path, fr) in dumps.items():
        pending = pending_deadline(fr)
        if pending is None:
            continue
        created = pending[0] - pending[1]
        try:
            written = path.stat().st_mtime
        except OSError:
            written = None
        if written is not None and created <= written <= pending[0] + DUMP_LATE_S:
            waited = written - created
        elif clock is not None and clock >= created:
            waited = clock - created
            job_files.note(f"{path}: the file's time ({_age(written, created)}) does not fit its pending "
                           "collective; how long it waited is from the dumps' own clock (at least that long)")
        else:
            continue
        out = waited if out is None else max(out, waited)
    return out


DUMP_LATE_S = 300.0  # a dump is written within this of its collective's timeout (torch's dump wait is 60 s)


def _age(written: float | None, created: float) -> str:
    if written is None:
        return "unreadable"
    return f"{(written - created) / 86400:.1f} days after the collective began" if written >= created \
        else "before the collective began"
