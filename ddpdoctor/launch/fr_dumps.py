"""Flight-recorder dump files left by a job: found under a log dir, read safely, judged like a live hang.

torch writes them on a collective timeout (``TORCH_FR_DUMP_TEMP_FILE``, default ``/tmp/nccl_trace_rank_<R>``,
pickled) or on request (``_dump_fr_trace_json``, JSON; run-trainer's bootstrap writes ``rank<R>.json``). A
pickle from a log dir is data a user hands us, not code: it is read with an unpickler that builds only
plain containers and scalars, so a crafted file cannot run anything.
"""
from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path

MAX_BYTES = 64 << 20  # per file: a flight record of a few thousand entries is a few MiB
RANK_IN_NAME = re.compile(r"(?:trace_rank_|rank)(\d{1,6})(?:\.json)?$")


class _PlainUnpickler(pickle.Unpickler):
    """Dicts, lists, tuples, strings, numbers, bools and None only: any class lookup is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}: only plain data is read")


def read_dump(path: Path) -> dict | None:
    """One dump as a dict, or None when it is not a readable flight record (too big, not JSON/pickle)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        data = json.loads(raw.decode("utf-8")) if raw[:1] in (b"{", b"[") else _PlainUnpickler(io.BytesIO(raw)).load()
    except (ValueError, UnicodeDecodeError, pickle.UnpicklingError, EOFError, RecursionError, TypeError,
            AttributeError, IndexError, KeyError):
        return None
    return data if isinstance(data, dict) and ("entries" in data or "pg_status" in data) else None


def find_dumps(roots: list[Path], limit: int = 4096) -> dict[int, tuple[Path, dict]]:
    """Rank -> (file, flight record) for every readable dump under the roots (bounded in count)."""
    found: dict[int, tuple[Path, dict]] = {}
    seen = 0
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            seen += 1
            if seen > limit * 8:
                return found
            m = RANK_IN_NAME.search(path.name)
            if not m or not path.is_file() or int(m.group(1)) in found:
                continue
            fr = read_dump(path)
            if fr is not None:
                found[int(m.group(1))] = (path, fr)
                if len(found) >= limit:
                    return found
    return found


def judge_dumps(dumps: dict[int, tuple[Path, dict]]) -> dict | None:
    """The hang verdict (collectives.judge) from dumps alone: no stacks, no process state. The dumps may have
    been written after a timeout (gloo then counts the timed-out collective as completed): the judge compares
    the ranks' last sequence ids and calls, and names the ranks of the job that left no dump."""
    if not dumps:
        return None
    from .collectives import judge

    evidence = {r: {"fr": fr, "host": None, "pid": None, "state": None, "stacks": None} for r, (_, fr) in dumps.items()}
    verdict = judge(evidence, expected=job_ranks(dumps), source="dumps")
    verdict["source"] = "flight-recorder dumps"
    verdict["files"] = {str(r): str(p) for r, (p, _) in sorted(dumps.items())}
    return verdict


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
