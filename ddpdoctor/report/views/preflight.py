"""The view of preflight documents: nodes merged, the check x node matrix, facts that differ, the per-node
versions table and each node's details (pure; no HTML).

Nodes are read through the check contract only (``ddpdoctor.exports``: each check's exports and comparables,
as the documents carry them, derived for documents written before they existed), never through a check's
own facts: a plugin's exports and comparables show here like a built-in check's.
"""
from __future__ import annotations

import json
from typing import Any

from ...api import BASELINE, split
from ...documents import own_results
from ...exports import exported, node_comparable
from ...redaction import scrub
from .common import SEVERITY, _finite, _label, _natural, worst


FULL_DETAIL_NODES = 16  # beyond this, details are kept for the odd and failing nodes only
DETAILS_BUDGET_BYTES = 1 << 20  # the nodes' facts shown in the page, escaped; the rest are in the result file


def one_per_cluster_run(docs: list[dict]) -> list[dict]:
    """Every node of a cluster preflight writes the whole verdict: the master's cluster.json, and each other
    node's node-<name>.json, which repeats the master's results and adds what only that node saw (messages it
    refused). Given together (`ddpdoctor report out/*.json` on a shared --output), each result would count
    once per node: one document per run is kept (the master's, else the first node's), and the others add only
    their own findings. Documents of other runs, or node-scope preflights, pass as they are."""
    def run_of(d: dict):
        master = d.get("master") if isinstance(d.get("master"), dict) else {}
        return (d.get("run_id"), master.get("node"), tuple(sorted(d.get("nodes") or {})))

    cluster = [d for d in docs if d.get("kind") == "preflight" and d.get("scope") == "cluster" and d.get("master")]
    kept: dict[tuple, dict] = {}
    for d in sorted(cluster, key=lambda d: d.get("role") == "worker"):  # the master's first
        kept.setdefault(run_of(d), d)
    extra: dict[int, list[dict]] = {}
    for d in cluster:
        base = kept[run_of(d)]
        if d is not base:
            extra.setdefault(id(base), []).extend(own_results(d))
    out, clustered = [], {id(d) for d in cluster}
    for d in docs:
        if id(d) in clustered and kept[run_of(d)] is not d:
            continue
        out.append(dict(d, results=d.get("results", []) + extra[id(d)]) if id(d) in extra else d)
    return out


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


def detail_candidates(nodes: dict[str, dict], findings: list[dict]) -> list[str]:
    """The nodes whose facts the report would show: every node up to 16, else the notable ones (64 at most)."""
    notable = {n for f in findings for n in f.get("nodes") or []}
    return sorted(nodes) if len(nodes) <= FULL_DETAIL_NODES else sorted(n for n in nodes if n in notable)[:64]


def details(nodes: dict[str, dict], findings: list[dict], budget: int = DETAILS_BUDGET_BYTES) -> list[dict]:
    """Each node's facts as indented JSON, secrets scrubbed again (``detail_candidates``), until their text in
    the page (quotes escaped) reaches ``budget``: a 64-node full mesh's facts grow with the square of the nodes
    (every peer's probe and lookup) and made a 3.9 MB page; the result file keeps them all."""
    out, used = [], 0
    for n in detail_candidates(nodes, findings):
        text = json.dumps(scrub(nodes[n].get("facts") or {}), indent=1, default=str, sort_keys=True)
        used += len(text) + 4 * text.count('"')  # each quote is &#34; in the page
        if out and used > budget:
            break
        out.append({"node": n, "json": text})
    return out
