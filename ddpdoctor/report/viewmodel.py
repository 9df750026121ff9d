"""The report's data: any set of ddpdoctor documents merged into one view model (pure; no HTML here).

Sections: verdict, findings (failures first, with their fix), a check x node matrix whose identical nodes
are grouped (usable at 512 nodes), facts that differ from the majority, clock offsets, the reachability
matrix, bench curves and per-node figures, the trainer's curves and root cause, and collapsed details.

Nodes are read through the check contract only (ddpdoctor.api: each check's exports and comparables, as the
documents carry them; ``exports.node_exports`` derives them for documents written before they existed), never
through a check's own facts: a plugin's exports and comparables show here like a built-in check's.
"""
from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter
from typing import Any, Mapping

from ..api import BASELINE, Level, split
from ..grouping import compress_hosts, describe_nodes, group_results, number_ranges
from ..redact import scrub
from ..exports import exported, node_comparable, node_exports
from .values import human

SEVERITY = {lv.value: lv.severity for lv in Level}
FULL_DETAIL_NODES = 16  # beyond this, details are kept for the odd and failing nodes only
MATRIX_FULL = 64  # reachability drawn as a table of round trips up to this many nodes; above, a heatmap


def worst(levels) -> str:
    """The worst of level names, as Level.worst orders them."""
    return Level.worst(Level(lv) for lv in levels).value


def build(docs: list[dict]) -> dict:
    pre = [d for d in docs if d.get("kind") == "preflight"]
    bench = [d for d in docs if d.get("kind") == "nccl-bench"]
    train = [d for d in docs if d.get("kind") == "run-trainer"]
    nodes = merge_nodes(pre)
    labels, label_note = short_labels(sorted(nodes))
    results = [r for d in pre for r in d.get("results", [])]
    # The documents carry their own "groups", but several documents are grouped together here, with the
    # same function (grouping.group_results), over every result.
    groups = [finding_group(g, results) for g in group_results(results, len(nodes))]
    findings = [g for g in groups if g["level"] in ("fail", "warn")]
    for d in bench:
        if d.get("verdict") == "fail":
            suspects = [s["node"] for s in (d.get("localisation") or {}).get("suspects", [])]
            findings.insert(0, single_group({
                "check": "nccl-bench", "level": "fail", "nodes": suspects, "summary": bench_failure(d),
                "fix": "drain the named node(s) and rerun nccl-bench --localise; check its NICs, cables and GPUs "
                       "(ddpdoctor preflight --perf)",
                "actual": (d.get("summary") or {}).get("avg_busbw_gbs"), "expected": None}))
    for d in train:
        rc = d.get("root_cause")
        if rc:
            findings.insert(0, single_group({
                "check": "run-trainer", "level": "fail", "nodes": [str(rc.get("host"))],
                "summary": f"rank {human(rc.get('rank'))} on {human(rc.get('host'))}: "
                           f"{(rc.get('error_type') or rc.get('category'))}: {rc.get('message')}"
                           + (f" (at {rc['location']})" if rc.get("location") else ""),
                "fix": rc.get("fix", ""), "actual": None, "expected": None}))
    verdicts = [d.get("verdict", "pass") for d in docs]
    clock, limit = clock_offsets(nodes, results, labels), clock_limit(nodes)
    return {
        "verdict": worst(verdicts) if verdicts else "pass",
        "counts": dict(Counter(r.get("level") for r in results)),
        "documents": [{"kind": d.get("kind"), "run_id": d.get("run_id"), "created": d.get("created"),
                       "verdict": d.get("verdict"), "scope": d.get("scope"), "tool_version": d.get("tool_version"),
                       "size": document_size(d)}
                      for d in docs],
        "warnings": run_warnings(docs),
        "findings": findings,
        "passing": [g for g in groups if g["level"] == "pass"],
        "skipped": [g for g in groups if g["level"] == "skip"],
        "matrix": check_matrix(results, sorted(nodes)),
        "versions": versions_table(nodes),
        "facts_diff": facts_diff(nodes, baseline=run_baseline(docs)),
        "clock": clock,
        "clock_limit_ms": limit,
        "clock_span": clock_axis(clock, limit),
        "labels": label_note,
        "mesh": reachability(nodes, labels),
        "bench": [bench_view(d) for d in bench],
        "trainer": [trainer_view(d) for d in train],
        "details": details(nodes, findings),
        "node_count": len(nodes),
        # One count for the header only when every preflight saw the same nodes; merged runs of different
        # sizes (a 1-node and a 3-node run) say their own size on their own line instead.
        "node_count_line": (plural(len(nodes), "node") if nodes and len({len(d.get("nodes") or {}) for d in pre}) == 1
                            else None),
    }


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
        m = re.match(r"^(.*?)(\d+)(\D*)$", n)
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


def merge_nodes(pre: list[dict]) -> dict[str, dict]:
    """Every node's facts, exports and comparables across the preflight documents; a later document fills what
    an earlier lacks (exports and comparables only where a document has them: readers derive the others)."""
    nodes: dict[str, dict] = {}
    for d in pre:
        for name, data in (d.get("nodes") or {}).items():
            entry = nodes.setdefault(name, {"host": data.get("host"), "addr": data.get("addr"), "rank": data.get("rank"),
                                            "facts": {}})
            for check, facts in (data.get("facts") or {}).items():
                entry["facts"].setdefault(check, facts)
            for key in ("exports", "comparable"):
                if isinstance(data.get(key), dict):
                    for check, value in data[key].items():
                        entry.setdefault(key, {}).setdefault(check, value)
    return nodes


def check_matrix(results: list[dict], node_names: list[str]) -> dict:
    """Checks x nodes, the worst level per cell; nodes with identical rows grouped, odd ones listed alone."""
    checks = sorted({r.get("check") for r in results if r.get("check")})
    cells: dict[str, dict[str, str]] = {n: {} for n in node_names}
    for r in results:
        for n in r.get("nodes") or []:
            row = cells.setdefault(n, {})
            row[r["check"]] = worst([row.get(r["check"], "pass"), r["level"]]) if r["check"] in row else r["level"]
    groups: dict[tuple, list[str]] = {}
    for n in sorted(cells):
        key = tuple(cells[n].get(c, "") for c in checks)
        groups.setdefault(key, []).append(n)
    rows = [{"nodes": members, "count": len(members), "label": _label(members, len(node_names)), "levels": list(key),
             "worst": worst([lv for lv in key if lv])} for key, members in groups.items()]
    rows.sort(key=lambda r: (-SEVERITY.get(r["worst"], 0), r["count"], r["label"]))
    return {"checks": checks, "rows": rows}


def _flatten(nodes: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """What must agree across nodes, as flat CHECK.KEY -> value per node: the checks' comparables, the same
    union the parity check compares (lists shown joined)."""
    out: dict[str, dict[str, Any]] = {}
    for name, data in nodes.items():
        flat: dict[str, Any] = {}
        for check, values in node_comparable(data).items():
            for key, value in (values or {}).items() if isinstance(values, dict) else ():
                flat[f"{check}.{key}"] = ", ".join(map(str, value)) if isinstance(value, list) else value
        out[name] = flat
    return out


def facts_diff(nodes: dict[str, dict], limit: int = 200, baseline: dict | None = None) -> list[dict]:
    """Each fact on which some node differs from the majority, or from ``baseline`` (a run's --baseline
    reference) where it has the fact: the reference value ("majority", None when there is none), the basis
    ("majority", "baseline" or "" for no majority: two nodes, a tie) and the odd nodes' values (every node's
    when there is no majority: none of them is right by count)."""
    flat = _flatten(nodes)
    reference = _flat_baseline(baseline)
    if len(flat) < 2 and not reference:
        return []
    keys = sorted({k for f in flat.values() for k in f})
    out = []
    for key in keys:
        values = {n: f.get(key, "(missing)") for n, f in flat.items()}
        s = split(values, reference.get(key))
        if s.odd:
            out.append({"fact": key, "majority": s.reference, "basis": s.basis, "no_majority": s.no_majority,
                        "majority_count": len(values) - len(s.odd) if s.basis == "majority" else 0,
                        "odd": [{"node": n, "value": values[n]} for n in s.odd[:32]], "odd_count": len(s.odd)})
        if len(out) >= limit:
            break
    return out


def _flat_baseline(baseline: dict | None) -> dict[str, list]:
    """A --baseline reference as flat CHECK.KEY -> accepted values, shown like ``_flatten``'s."""
    comparable = baseline.get("comparable") if isinstance(baseline, dict) else None
    out: dict[str, list] = {}
    for check, values in comparable.items() if isinstance(comparable, dict) else ():
        for key, accepted in values.items() if isinstance(values, dict) else ():
            if isinstance(accepted, list) and accepted:
                out[f"{check}.{key}"] = [", ".join(map(str, v)) if isinstance(v, list) else v for v in accepted]
    return out


def run_baseline(docs: list[dict]) -> dict | None:
    """The --baseline reference a preflight among ``docs`` was judged against, if any."""
    for d in docs:
        ref = (d.get("run") or {}).get(BASELINE) if d.get("kind") == "preflight" else None
        if isinstance(ref, dict):
            return ref
    return None


# ------------------------------------------------------------------------------------------ per-node table
VERSION_COLUMNS = [("python", "Python"), ("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"),
                   ("driver", "driver"), ("gpus", "GPUs"), ("iface", "interface to master")]


def node_versions(facts: dict) -> dict[str, str]:
    """A node's row of the per-node table from its facts alone (a document without exports)."""
    return versions_row({"facts": facts})


def versions_row(data: dict) -> dict[str, str]:
    """A node's versions, GPUs, interface to the master and the cells checks add ("summary"), from its
    exports. Missing values are empty strings; a check's cell is keyed "summary.COLUMN"."""
    def text(value) -> str:
        return "" if value is None or isinstance(value, (dict, list)) else str(value)

    versions = exported(data, "versions") or {}
    versions = versions if isinstance(versions, dict) else {}
    gpus, iface = exported(data, "gpus"), exported(data, "interface")
    gpu_text = ""
    if isinstance(gpus, dict):
        models = gpus.get("models") if isinstance(gpus.get("models"), dict) else {}
        gpu_text = ", ".join(f"{n} × {m}" for m, n in sorted(models.items())) or "none"
        if _finite(gpus.get("lost")) and gpus["lost"]:
            gpu_text += f" (+{gpus['lost']} lost)"
    name, mtu = (text(iface.get("name")), text(iface.get("mtu"))) if isinstance(iface, dict) else ("", "")
    row = {"python": text(versions.get("python")), "torch": text(versions.get("torch")),
           "cuda": text(versions.get("cuda")), "nccl": text(versions.get("nccl")),
           "driver": text(versions.get("driver")), "gpus": gpu_text,
           "iface": f"{name} (mtu {mtu})" if name and mtu else name}
    summary = exported(data, "summary")
    for column, value in sorted(summary.items()) if isinstance(summary, dict) else ():
        row[f"summary.{column}"] = text(value)
    return row


def versions_table(nodes: dict[str, dict], limit: int = 64) -> dict:
    """Every node's versions, GPUs and interface; nodes with identical values share a row, the rows with
    the most values that differ from the majority first, and each such value marked odd."""
    per_node = {n: versions_row(data) for n, data in nodes.items()}
    extra = sorted({k for v in per_node.values() for k in v if k.startswith("summary.")})
    for v in per_node.values():
        for k in extra:
            v.setdefault(k, "")
    cols = [(k, title) for k, title in VERSION_COLUMNS + [(k, k[len("summary."):]) for k in extra]
            if any(v[k] for v in per_node.values())]
    if not per_node or not cols:
        return {"columns": [], "rows": [], "hidden": 0}
    # no majority (two nodes that differ, a tie): None, so every node's value in that column is marked
    common = {k: split({n: v[k] for n, v in per_node.items()}).reference for k, _ in cols}
    same: dict[tuple, list[str]] = {}
    for n in sorted(per_node, key=_natural):
        same.setdefault(tuple(per_node[n][k] for k, _ in cols), []).append(n)
    rows = []
    for values, members in same.items():
        cells = [{"value": v, "odd": len(per_node) > 1 and v != common[k]} for (k, _), v in zip(cols, values)]
        rows.append({"where": _label(members, len(per_node)), "nodes": members, "count": len(members),
                     "cells": cells, "odd": sum(c["odd"] for c in cells)})
    rows.sort(key=lambda r: (-r["odd"], r["count"], r["where"]))
    return {"columns": [title for _, title in cols], "rows": rows[:limit], "hidden": max(0, len(rows) - limit),
            "majority": [common[k] for k, _ in cols]}


def _natural(text: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


# ------------------------------------------------------------------------------------------------- clocks
def clock_checks(nodes: dict[str, dict]) -> set[str]:
    """The checks that export a node's clock (the contract's "clock" kind), whatever their names."""
    return {check for data in nodes.values() for check, e in node_exports(data).items()
            if isinstance(e, Mapping) and isinstance(e.get("clock"), Mapping)}


def clock_offsets(nodes: dict[str, dict], results: list[dict] | None = None,
                  labels: dict[str, str] | None = None) -> list[dict]:
    """Each node's offset from the master with its error bound (the "clock" export); ``bad``: a check that
    exports the clock warned or failed on that node."""
    sources = clock_checks(nodes)
    level: dict[str, str] = {}
    for r in results or []:
        if r.get("check") in sources and r.get("level") in ("warn", "fail"):
            for n in r.get("nodes") or []:
                level[n] = r["level"]
    out = []
    for name in sorted(nodes, key=_natural):
        f = exported(nodes[name], "clock")
        f = f if isinstance(f, dict) else {}
        off, bound = f.get("offset_ms"), f.get("bound_ms") or 0.0
        if _finite(off):
            out.append({"node": name, "label": (labels or {}).get(name, name), "offset_ms": off,
                        "bound_ms": bound if _finite(bound) else 0.0, "bad": name in level})
    return out


CLOCK_MIN_HALF_SPAN_MS = 0.5  # the axis never shows less than ±0.5 ms: a healthy NTP cluster reads as such


def nice_step(span: float, count: int = 4) -> float:
    """A step of 1, 2, 2.5 or 5 x 10^k giving about ``count`` intervals over ``span``."""
    raw = max(span, 1e-12) / count
    base = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5):
        if m * base >= raw * (1 - 1e-9):
            return m * base
    return 10 * base


def clock_axis(points: list[dict], limit: float | None, min_half: float = CLOCK_MIN_HALF_SPAN_MS) -> dict:
    """The clock chart's axis, ±half in ms, fitted to the offsets and their bounds (not to the limit, which
    would flatten sub-millisecond offsets). When a few bad nodes lie more than 10 x beyond the rest, the
    axis fits the rest and those are drawn at its edge with their figure (``clipped``)."""
    if not points:
        return {"half": min_half, "step": nice_step(2 * min_half), "clipped": False, "limit_shown": False, "worst": ""}
    extent = [abs(p["offset_ms"]) + p["bound_ms"] for p in points]
    good = [e for e, p in zip(extent, points) if not p["bad"]]
    hi_good, hi = max(good + [min_half]), max(extent + [min_half])
    clipped = hi > 10 * hi_good and len(good) >= len(points) / 2
    half = hi_good if clipped else hi
    step = nice_step(2 * half)
    half = math.ceil(half / step - 1e-9) * step
    far = max(points, key=lambda p: abs(p["offset_ms"]))
    return {"half": half, "step": step, "clipped": clipped, "limit_shown": bool(limit and limit <= half),
            "worst": f"{far['node']} {far['offset_ms']:+.3f} ms ± {far['bound_ms']:.3f}"}


def clock_limit(nodes: dict[str, dict], default: float = 100.0) -> float:
    """The warning limit the run's clock check used, as its "clock" export says (``limit_ms``); ``default``
    for documents written before the export carried it."""
    for name in sorted(nodes, key=_natural):
        f = exported(nodes[name], "clock")
        limit = f.get("limit_ms") if isinstance(f, dict) else None
        if _finite(limit) and limit > 0:
            return float(limit)
    return default


def _finite(v) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))


# ---------------------------------------------------------------------------------------------- reachability
def rtt_text(ms: float) -> str:
    """A round trip in a narrow cell: .21 (ms), 1.3, 12, 340, 2.1k."""
    if ms < 1:
        return f"{ms:.2f}".lstrip("0") if ms >= 0.01 else "<.01"
    if ms < 10:
        return f"{ms:.1f}"
    if ms < 1000:
        return f"{ms:.0f}"
    return f"{ms / 1000:.1f}k"


def reachability(nodes: dict[str, dict], labels: dict[str, str] | None = None) -> dict:
    """Probed links with their round trip; a grid up to MATRIX_FULL nodes (cells: ok with the round trip in
    ms, slow, failed, not probed, self), the failed and the slowest links at any size."""
    names = sorted(nodes, key=_natural)
    links: dict[tuple[str, Any], tuple[str, float | None]] = {}
    for src in names:
        for p in exported(nodes[src], "links") or []:
            if not isinstance(p, dict):
                continue
            rtt = p.get("rtt_ms") if _finite(p.get("rtt_ms")) else None
            links[(src, p.get("peer"))] = ("ok" if p.get("ok") is True else str(p.get("error_class") or "failed"), rtt)
    if not links:
        return {"nodes": [], "grid": [], "failed": [], "probed": 0, "slowest": [], "median_ms": None}
    rtts = sorted(r for c, r in links.values() if c == "ok" and r is not None)
    median = rtts[len(rtts) // 2] if rtts else None
    slow_ms = max(3 * median, median + 1.0) if median is not None else None
    failed = [{"src": s, "dst": d, "class": c} for (s, d), c in
              sorted(((k, c) for k, (c, _) in links.items() if c != "ok"), key=lambda kv: kv[0])]
    slowest = heapq.nlargest(8, ((r, s, d) for (s, d), (c, r) in links.items() if c == "ok" and r is not None),
                             key=lambda t: t[0])
    grid, cells = [], []
    if len(names) > MATRIX_FULL:  # a heatmap (svg.heatmap): one square per probed link, no text in it
        index = {n: i for i, n in enumerate(names)}
        limit = slow_ms if slow_ms is not None else math.inf
        for (s, d), (state, rtt) in links.items():
            j = index.get(d)
            if j is None:
                continue
            if state == "ok" and (rtt is None or rtt <= limit):
                cells.append((index[s], j, "ok", ""))  # drawn as one path, no tooltip: thousands of them
                continue
            kind = "slow" if state == "ok" else "bad"
            cells.append((index[s], j, kind, f"{s} → {d}: " + (f"{rtt:.3g} ms" if kind == "slow" else state)))
    if len(names) <= MATRIX_FULL:
        for s in names:
            row = []
            for d in names:
                state, rtt = links.get((s, d), ("self" if s == d else "none", None))
                if state == "ok":
                    slow = slow_ms is not None and rtt is not None and rtt > slow_ms
                    row.append({"state": "slow" if slow else "ok", "text": rtt_text(rtt) if rtt is not None else "ok",
                                "title": f"{s} → {d}: " + (f"{rtt:.3g} ms" if rtt is not None else "reachable")})
                elif state == "self":
                    row.append({"state": "self", "text": "", "title": f"{s} (itself)"})
                elif state == "none":
                    row.append({"state": "none", "text": "", "title": f"{s} → {d}: not probed"})
                else:
                    row.append({"state": "bad", "text": state if len(names) <= 12 else "✕",
                                "title": f"{s} → {d}: {state}"})
            grid.append(row)
    size = "s" if len(names) <= 12 else "m" if len(names) <= 32 else "l"  # the table's cell size (report.css)
    return {"nodes": names if grid else [], "labels": [(labels or {}).get(n, n) for n in names] if grid else [],
            "grid": grid, "size": size, "heatmap": {"labels": [(labels or {}).get(n, n) for n in names],
                                                   "cells": cells} if cells else None,
            "failed": failed, "probed": len(links), "median_ms": median, "slow_ms": slow_ms,
            "slowest": [{"src": s, "dst": d, "rtt_ms": r} for r, s, d in slowest]}


def bench_failure(d: dict) -> str:
    s = d.get("summary") or {}
    parts = []
    if s.get("wrong"):
        parts.append(f"{s['wrong']} wrong element(s)")
    sus = (d.get("localisation") or {}).get("suspects") or []
    if sus:
        parts.append("slow node(s): " + ", ".join(f"{x['node']} ({x['busbw_gbs']:.3g} GB/s vs median "
                                                  f"{x['median_gbs']:.3g})" for x in sus))
    if not parts and (d.get("run") or {}).get("min_busbw") is not None:
        parts.append(f"average busbw {s.get('avg_busbw_gbs')} GB/s under --min-busbw {d['run']['min_busbw']}")
    if d.get("error"):
        parts.append(str((d["error"] or {}).get("message")))
    return "nccl-bench failed: " + ("; ".join(parts) or "see the table")


BENCH_SETTINGS = [("backend", "backend"), ("world_size", "world size"), ("nnodes", "nodes"),
                  ("nproc_per_node", "ranks per node"), ("dtype", "dtype"), ("ops", "ops"), ("sizes", "sizes"),
                  ("warmup", "warmup iters"), ("iters", "iters"), ("graph", "CUDA graph"), ("check", "data check"),
                  ("min_busbw", "--min-busbw (GB/s)"), ("wall_s", "wall time (s)")]


def _bytes(n) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if _finite(n) and n >= size and n % size == 0:
            return f"{int(n) // size} {unit}"
    return f"{n} B"


def bench_settings(run: dict) -> list[tuple[str, str]]:
    """The run's settings as (label, text), only those the document has."""
    out = []
    for key, label in BENCH_SETTINGS:
        v = run.get(key)
        if v is None or v == "" or v == []:
            continue
        if key == "sizes" and isinstance(v, list) and v and all(_finite(x) for x in v):
            text = f"{_bytes(min(v))} … {_bytes(max(v))} ({len(v)} sizes)" if len(v) > 1 else _bytes(v[0])
        elif isinstance(v, list):
            text = ", ".join(str(x) for x in v)
        elif isinstance(v, bool):
            text = "yes" if v else "no"
        else:
            text = str(v)
        out.append((label, text))
    if not run.get("sizes") and _finite(run.get("min_bytes")) and _finite(run.get("max_bytes")):
        out.append(("sizes", f"{_bytes(run['min_bytes'])} … {_bytes(run['max_bytes'])}"))
    return out


def _ranges(ints: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3, 8" (grouping's ranges, as a sentence lists them)."""
    return number_ranges([str(v) for v in sorted(set(ints))], sep=", ") if ints else ""


def bench_hosts(hosts) -> dict:
    """Which ranks ran on which host, the hosts in rank order; a short line naming them all."""
    by_host: dict[str, list[int]] = {}
    for rank, host in (hosts or {}).items() if isinstance(hosts, dict) else ():
        try:
            r = int(rank)
        except (TypeError, ValueError):
            continue
        by_host.setdefault(str(host), []).append(r)
    rows = [{"host": h, "ranks": _ranges(rs), "count": len(rs)} for h, rs in
            sorted(by_host.items(), key=lambda kv: min(kv[1]))]
    per = sorted({r["count"] for r in rows})
    line = ""
    if rows:
        line = f"{len(rows)} host(s)" + (f", {per[0]} rank(s) each" if len(per) == 1 else "") + \
               f": {_label([r['host'] for r in rows], 0, 160)}"
    # The usual layout (host i runs ranks k*i .. k*i+k-1) is said in words; any other is listed host by host.
    k = per[0] if len(per) == 1 else 0
    regular = bool(k) and all(r["ranks"] == (f"{i * k}-{i * k + k - 1}" if k > 1 else str(i))
                              for i, r in enumerate(rows))
    if regular and len(rows) > 1:
        line += f"; the i-th host runs ranks {k}i … {k}i+{k - 1}" if k > 1 else "; host i runs rank i"
    return {"rows": [] if regular and len(rows) > 16 else rows, "line": line}


def bench_view(d: dict) -> dict:
    series: dict[str, dict[str, list]] = {}
    for r in d.get("rows", []):
        if r.get("group", "all") != "all":
            continue
        for form in ("out_of_place", "in_place"):
            f = r.get(form)
            if f:
                series.setdefault(r["op"], {}).setdefault(form.replace("_", "-"), []).append(
                    (r["size"], f.get("busbw_gbs"), f.get("time_us"), f.get("wrong")))
    loc = d.get("localisation") or {}
    pairs = loc.get("pairs") or []
    per_node: dict[str, float] = {}
    for p in pairs:
        for n in p.get("nodes", []):
            per_node[n] = min(per_node.get(n, float("inf")), p.get("busbw_gbs") or 0.0)
    suspects = {s.get("node") for s in loc.get("suspects") or []}
    run = d.get("run") or {}
    return {"run": run, "summary": d.get("summary") or {}, "verdict": d.get("verdict"),
            "settings": bench_settings(run), "hosts": bench_hosts(d.get("hosts")),
            "series": series, "expected": d.get("expected") or {}, "localisation": loc,
            "per_node": [(n, v, n in suspects) for n, v in sorted(per_node.items())],
            "median": loc.get("median_gbs"), "rows": [r for r in d.get("rows", []) if r.get("group", "all") != "all"]}


def rank_table(metrics: dict) -> dict:
    """Per rank: steps, mean and worst step time, throughput, peak memory, from the metrics the run wrote
    (only the columns some rank has); a rank well off the median (slower, more memory) is marked odd."""
    def nums(rows, key):
        return [r.get(key) for r in rows if isinstance(r, dict) and _finite(r.get(key))]

    def order(rank):
        return (0, int(rank), "") if str(rank).isdigit() else (1, 0, str(rank))

    ranks = []
    for rank in sorted(metrics, key=order):
        rows = metrics[rank] if isinstance(metrics[rank], list) else []
        st, tps, mem, steps = nums(rows, "step_time_s"), nums(rows, "tokens_per_s"), nums(rows, "peak_mem_bytes"), \
            nums(rows, "step")
        ranks.append({"rank": rank, "steps": int(max(steps)) if steps else None,
                      "step_ms": 1000 * sum(st) / len(st) if st else None,
                      "step_ms_max": 1000 * max(st) if st else None,
                      "tokens_per_s": sum(tps) / len(tps) if tps else None,
                      "mem_gib": max(mem) / 2**30 if mem else None})
    cols = [k for k in ("steps", "step_ms", "step_ms_max", "tokens_per_s", "mem_gib") if any(r[k] is not None
                                                                                         for r in ranks)]
    for key, factor in (("step_ms", 1.15), ("step_ms_max", 1.5), ("mem_gib", 1.10)):
        vals = sorted(r[key] for r in ranks if r[key] is not None)
        med = vals[len(vals) // 2] if vals else None
        for r in ranks:
            r[f"{key}_odd"] = bool(len(vals) > 2 and med and r[key] is not None and r[key] > med * factor)
    tps = sorted(r["tokens_per_s"] for r in ranks if r["tokens_per_s"] is not None)
    for r in ranks:
        r["tokens_per_s_odd"] = bool(len(tps) > 2 and r["tokens_per_s"] is not None and
                                     r["tokens_per_s"] < tps[len(tps) // 2] / 1.15)
    return {"columns": cols, "ranks": ranks if cols else []}


def trainer_view(d: dict) -> dict:
    metrics = d.get("metrics") or {}
    summary = d.get("metrics_summary") or {}
    return {"config": d.get("config") or {}, "verdict": d.get("verdict"), "restarts": d.get("restarts", 0),
            "summary": summary, "line": trainer_line(summary, d), "root_cause": d.get("root_cause"),
            "consequences": d.get("consequences") or [], "checksums_equal": d.get("checksums_equal"),
            "loss": {f"rank {r}": [(m["step"], m.get("loss")) for m in rows] for r, rows in sorted(metrics.items())},
            "throughput": {f"rank {r}": [(m["step"], m.get("tokens_per_s")) for m in rows]
                           for r, rows in sorted(metrics.items())},
            "ranks": rank_table(metrics), "run_id": d.get("run_id"),
            "attempts": d.get("attempts") or [], "hang": d.get("hang"), "preflight": d.get("preflight")}


def trainer_line(s: dict, d: dict) -> list[str]:
    """The run in a few phrases, only what the document holds (a user script may write no metrics)."""
    out = []
    if _finite(s.get("steps")) and s.get("steps"):
        out.append(f"{s['steps']:g} steps on {s.get('ranks')} rank(s)" if s.get("ranks") else f"{s['steps']:g} steps")
    if _finite(s.get("first_loss")) and _finite(s.get("final_loss")):
        out.append(f"loss {s['first_loss']:.4g} → {s['final_loss']:.4g}")
    if _finite(s.get("tokens_per_s_mean")) and s.get("tokens_per_s_mean"):
        out.append(f"{s['tokens_per_s_mean']:,.0f} tokens/s")
    if _finite(s.get("step_time_s_mean")):
        out.append(f"step {1000 * s['step_time_s_mean']:.1f} ms (mean)")
    if _finite(s.get("peak_mem_bytes")) and s.get("peak_mem_bytes"):
        out.append(f"peak memory {s['peak_mem_bytes'] / 2**30:.2f} GiB")
    if not out:
        out.append("no training metrics recorded")
    restarts = d.get("restarts")
    out.append(f"restarts {restarts}" if _finite(restarts) else "restarts 0")
    ce = d.get("checksums_equal")
    out.append("checksums " + ("not compared" if ce is None else "equal" if ce is True else "DIFFER"))
    return out


def details(nodes: dict[str, dict], findings: list[dict]) -> list[dict]:
    """Each node's facts as indented JSON, secrets scrubbed again; every node up to 16, else the notable ones."""
    notable = {n for f in findings for n in f.get("nodes") or []}
    names = sorted(nodes) if len(nodes) <= FULL_DETAIL_NODES else sorted(n for n in nodes if n in notable)[:64]
    return [{"node": n, "json": json.dumps(scrub(nodes[n].get("facts") or {}), indent=1, default=str, sort_keys=True)}
            for n in names]
