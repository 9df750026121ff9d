"""Rank lists in a document, bounded: a list of ranks (or of per-rank objects) longer than ``LISTED`` keeps its
first ``LISTED`` entries and carries every rank as ranges beside it, as the terminal shows them.

A flight-recorder dump may claim a process group of 65,536 ranks; the judge then names 65,534 culprits that left
no record, and the document was 13 MB of identical objects. The terminal said "rank(s) 2-65535" in one line; the
document now says the same: ``"culprits": [64 objects], "culprits_ranges": [[2, 65535]], "culprits_total":
65534``. A list at or under the limit is written as before, without the two keys (SCHEMA.md, "Rank lists").
Applied where a run-trainer or attach document is made (``documents.envelope``), after every decision: the
verdict is judged on the whole lists, and what shows it (terminal, --json, run.json, attach.json, the report)
reads the document. ``ranks_text`` is how a renderer names such a list: the ranges when the document has them.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .grouping import rank_ranges

LISTED = 64  # entries kept of a longer list: a verdict's rows a person reads, not the world a dump claims
MAX_CULPRIT_ROWS = 8  # culprits shown one row each on a terminal; more: the first ones, then all as rank ranges

# In a verdict document (run.json's hang.verdict, attach's diagnosis): the lists of ranks or of rank objects,
# and the maps keyed by rank.
_VERDICT_LISTS = ("culprits", "consequences", "named", "likely_culprits", "no_evidence", "via")
_VERDICT_MAPS = ("call_sites", "waits")
_COLLECTIVE_LISTS = ("waiting_ranks",)
_COLLECTIVE_MAPS = ("ops", "last_seq", "calls")


def _rank(item: Any) -> int | None:
    value = item.get("rank") if type(item) is dict else item  # noqa: E721 - hot: 65,536 items, no ABC check
    if type(value) is int:  # noqa: E721 - not bool
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
        return int(value)
    return None


def spans(ranks: Iterable[int]) -> list[list[int]]:
    """[0, 1, 2, 3, 8] -> [[0, 3], [8, 8]]: every rank once, in order, consecutive ranks as one [first, last]."""
    out: list[list[int]] = []
    for r in sorted(set(ranks)):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return out


def spans_text(pairs: Iterable) -> str:
    """[[0, 3], [8, 8], [10, 11]] -> "0-3, 8, 10, 11" (as ``grouping.rank_ranges`` writes a list)."""
    parts = []
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(_rank(x) is not None for x in pair)):
            continue
        first, last = int(pair[0]), int(pair[1])
        parts.append(f"{first}-{last}" if last - first >= 2 else ", ".join(map(str, range(first, last + 1))))
    return ", ".join(parts)


def ranks_text(container: Mapping, key: str, drop: int | None = None) -> str:
    """The ranks of ``container[key]`` as ranges, all of them (but ``drop``): from ``<key>_ranges`` when the
    document bounded the list, else from the list itself (ranks, or objects with a "rank")."""
    if not isinstance(container, Mapping):
        return ""
    pairs = container.get(f"{key}_ranges")
    if isinstance(pairs, list):
        return spans_text(_without(pairs, drop))
    items = container.get(key) or []
    if isinstance(items, Mapping):
        items = list(items)
    if not isinstance(items, list):
        return ""
    ranks = [item.get("rank") if isinstance(item, Mapping) else item for item in items]
    return rank_ranges(r for r in ranks if drop is None or r != drop)


def _without(pairs: list, rank: int | None) -> list:
    """Ranges with one rank taken out (a range it falls in split in two)."""
    out = []
    for pair in pairs:
        if rank is None or not (isinstance(pair, (list, tuple)) and len(pair) == 2) \
                or not all(isinstance(x, int) for x in pair) or not pair[0] <= rank <= pair[1]:
            out.append(pair)
            continue
        out += [p for p in ([pair[0], rank - 1], [rank + 1, pair[1]]) if p[0] <= p[1]]
    return out


def total(container: Mapping, key: str) -> int:
    """How many entries ``container[key]`` had before the document bounded it."""
    value = container.get(f"{key}_total") if isinstance(container, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    items = container.get(key) if isinstance(container, Mapping) else None
    return len(items) if isinstance(items, (list, Mapping)) else 0


def bound_list(container: dict, key: str, limit: int = LISTED) -> None:
    """``container[key]`` (a list of ranks or of per-rank objects, or a map keyed by rank) cut to ``limit``
    entries, with ``<key>_ranges`` (every rank it held) and ``<key>_total`` beside it, when it is longer."""
    items = container.get(key)
    if not isinstance(items, (list, dict)) or len(items) <= limit:
        return
    container[f"{key}_ranges"] = spans(r for r in map(_rank, items) if r is not None)
    container[f"{key}_total"] = len(items)
    if isinstance(items, dict):
        keys = sorted(items, key=lambda k: (_rank(k) is None, _rank(k) or 0, str(k)))[:limit]
        container[key] = {k: items[k] for k in keys}
    else:
        container[key] = items[:limit]


def bound_verdict(verdict: Any, limit: int = LISTED) -> None:
    """A verdict document (``judge.words.to_json``'s shape, or attach's diagnosis) bounded in place."""
    if not isinstance(verdict, dict):
        return
    for key in _VERDICT_LISTS + _VERDICT_MAPS:
        bound_list(verdict, key, limit)
    for c in verdict.get("consequences") or []:
        if isinstance(c, dict) and isinstance(c.get("wait"), dict):
            bound_list(c["wait"], "for", limit)
    for w in (verdict.get("waits") or {}).values():
        if isinstance(w, dict):
            bound_list(w, "awaited", limit)
    coll = verdict.get("collective")
    if isinstance(coll, dict):
        for key in _COLLECTIVE_LISTS + _COLLECTIVE_MAPS:
            bound_list(coll, key, limit)


def bound_document(kind: str, body: dict, limit: int = LISTED) -> dict:
    """A run-trainer or attach document's body with its rank lists bounded (a copy where it changes)."""
    if isinstance(body.get("outcome"), dict):  # judge/outcome.py's Outcome, in every forensics document
        body = dict(body, outcome=_bounded_copy(body["outcome"], ("culprits", "consequences"), limit))
    if kind == "run-trainer":
        body = dict(body)
        for key in ("consequences", "culprit_ranks"):
            bound_list(body, key, limit)
        attempts = body.get("attempts")
        if isinstance(attempts, list):
            body["attempts"] = [_bounded_copy(a, ("consequences",), limit) for a in attempts]
        hang = body.get("hang")
        if isinstance(hang, dict) and isinstance(hang.get("verdict"), dict):
            body["hang"] = dict(hang, verdict=_verdict_copy(hang["verdict"], limit))
            if isinstance(hang.get("outcome"), dict):
                body["hang"]["outcome"] = _bounded_copy(hang["outcome"], ("culprits", "consequences"), limit)
    elif kind == "attach":
        body = dict(body)
        if isinstance(body.get("diagnosis"), dict):
            body["diagnosis"] = _verdict_copy(body["diagnosis"], limit)
        body["job"] = _bounded_copy(body.get("job"), ("ranks_elsewhere", "ranks_here"), limit)
    return body


def _bounded_copy(container: Any, keys: tuple[str, ...], limit: int) -> Any:
    if not isinstance(container, dict):
        return container
    out = dict(container)
    for key in keys:
        bound_list(out, key, limit)
    return out


def _verdict_copy(verdict: dict, limit: int) -> dict:
    """A copy deep enough that bounding it leaves the caller's verdict whole (run-trainer keeps using it)."""
    out = dict(verdict)
    if isinstance(out.get("collective"), dict):
        out["collective"] = dict(out["collective"])
    if isinstance(out.get("consequences"), list):
        out["consequences"] = [dict(c, wait=dict(c["wait"])) if isinstance(c, dict) and isinstance(c.get("wait"), dict)
                               else c for c in out["consequences"][:limit + 1]] + out["consequences"][limit + 1:]
    if isinstance(out.get("waits"), dict):
        out["waits"] = {k: dict(w) if isinstance(w, dict) else w for k, w in out["waits"].items()}
    bound_verdict(out, limit)
    return out
