"""What every part of the report's view shares: levels, counts, findings as groups, short node labels.

Pure: no HTML, no document kind in particular; the per-kind views (preflight, clock, mesh, bench, trainer)
build on these.
"""
from __future__ import annotations

import math
import re

from ...api import Level
from ...grouping import compress_hosts, describe_nodes


SEVERITY = {lv.value: lv.severity for lv in Level}


def worst(levels) -> str:
    """The worst of level names, as Level.worst orders them."""
    return Level.worst(Level(lv) for lv in levels).value


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def document_size(d: dict) -> str | None:
    """How big the run behind one document was: nodes for a preflight, ranks and nodes for the others."""
    try:
        if d.get("kind") == "preflight":
            return plural(len(d.get("nodes") or {}), "node")
        run = d.get("run") if d.get("kind") == "nccl-bench" else d.get("config")
        run = run if isinstance(run, dict) else {}
        ranks = run.get("world_size")
        nnodes = run.get("nnodes")
        if ranks is None and isinstance(nnodes, int) and isinstance(run.get("nproc_per_node"), int):
            ranks = nnodes * run["nproc_per_node"]
        parts = ([plural(ranks, "rank")] if isinstance(ranks, int) and not isinstance(ranks, bool) else []) + \
                ([plural(nnodes, "node")] if isinstance(nnodes, int) and not isinstance(nnodes, bool) else [])
        return " on ".join(parts) or None
    except (TypeError, ValueError):  # a hand-edited file: the size is only a caption
        return None


def run_warnings(docs: list[dict]) -> list[str]:
    """One warning when the documents come from different runs. A workflow (preflight, nccl-bench,
    run-trainer) shares one run id and merges silently; node-scope preflights of one cluster have a run id
    each by nature and merge silently too."""
    run_ids = sorted({str(d.get("run_id")) for d in docs if d.get("run_id")})
    pre = [d for d in docs if d.get("kind") == "preflight"]
    if len(run_ids) > 1 and not (len(pre) == len(docs) and all(d.get("scope") == "node" for d in pre)):
        return [f"{len(run_ids)} runs merged ({', '.join(run_ids)}): results may come from different moments"]
    return []


MEMBERS_SHOWN = 64  # per-node lines listed under a finding; the rest are counted (every one is in the JSON)


PASS_MEMBERS_SHOWN = 16  # under a passing check (the matrix below has every node's level)


def finding_group(g: dict, results: list[dict]) -> dict:
    """A group from grouping.group_results with its members' own lines (summary, measured, expected)."""
    members = [results[i] for i in g["members"]]
    shown = PASS_MEMBERS_SHOWN if g["level"] == "pass" else MEMBERS_SHOWN
    return dict(g, members=[_member(r) for r in members[:shown]], hidden=max(0, len(members) - shown),
                fix_withheld=members[0].get("fix_withheld") if not g.get("fix") else None,
                actual=members[0].get("actual") if len(members) == 1 else None,
                expected=members[0].get("expected") if len(members) == 1 else None)


def single_group(r: dict) -> dict:
    """A finding of nccl-bench or run-trainer, in the shape of a group of one."""
    nodes = [n for n in r.get("nodes") or [] if n]
    return dict(r, nodes=nodes, where=compress_hosts(nodes) if nodes else "", count=1, members=[], hidden=0)


def _member(r: dict) -> dict:
    nodes = r.get("nodes") or []
    return {"where": nodes[0] if len(nodes) == 1 else compress_hosts(nodes) if nodes else "", "summary": r.get("summary", ""),
            "actual": r.get("actual"), "expected": r.get("expected")}


def short_labels(names: list[str], width: int = 10) -> tuple[dict[str, str], str]:
    """Distinct short labels for charts and grid headers, and a note saying how to read them.

    Names sharing one pattern (``node007``, ``gpu-a017.cluster``) are labelled by their number, other
    names by themselves when short enough; when that is not distinct, every node by its position."""
    if not names:
        return {}, ""
    pattern: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for n in names:
        m = re.match(r"^(.*?)([0-9]+)([^0-9]*)$", n)
        if m:
            pattern.setdefault((m.group(1), m.group(3)), []).append((n, m.group(2)))
    labels: dict[str, str] = {}
    note = ""
    if pattern:
        (prefix, suffix), members = max(pattern.items(), key=lambda kv: len(kv[1]))
        if len(members) > 1 or len(names) == 1:
            labels = {n: digits for n, digits in members}
            note = f"numbers stand for {prefix}N{suffix}" if prefix or suffix else ""
    for n in names:
        if n not in labels:
            labels[n] = n if len(n) <= width else n[: width - 1] + "…"
    if len(set(labels.values())) == len(labels):
        return labels, note
    return {n: f"#{i}" for i, n in enumerate(names)}, "#N: the N-th node in name order (full names in the tooltips)"


def _label(members: list[str], total: int = 0, width: int = 90) -> str:
    text = describe_nodes(members, total)
    if len(text) <= width:
        return text
    return text[: width - 1] + f"… ({len(members)} nodes)"


def _natural(text: str) -> list:
    # ASCII digit runs only ('²' is a digit to \d and isdigit(), not to int()): the odd pieces of the split
    return [(0, int(t), "") if i % 2 else (1, 0, t) for i, t in enumerate(re.split(r"([0-9]+)", text))]


def _finite(v) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))
