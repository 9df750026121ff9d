"""The report's data: any set of ddpdoctor documents merged into one view model (pure; no HTML here).

Sections: verdict, findings (failures first, with their fix), a check x node matrix whose identical nodes
are grouped (usable at 512 nodes), facts that differ from the majority, clock offsets, the reachability
matrix, bench curves and per-node figures, the trainer's curves and root cause, and collapsed details.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..api import Level, majority
from ..redact import scrub

SEVERITY = {lv.value: lv.severity for lv in Level}
FULL_DETAIL_NODES = 16  # beyond this, details are kept for the odd and failing nodes only
MATRIX_FULL = 64  # reachability drawn as a full matrix up to this many nodes; above, the failed links only


def worst(levels) -> str:
    """The worst of level names, as Level.worst orders them."""
    return Level.worst(Level(lv) for lv in levels).value


def build(docs: list[dict]) -> dict:
    pre = [d for d in docs if d.get("kind") == "preflight"]
    bench = [d for d in docs if d.get("kind") == "nccl-bench"]
    train = [d for d in docs if d.get("kind") == "run-trainer"]
    run_ids = sorted({d.get("run_id") for d in docs if d.get("run_id")})
    warnings = []
    if len(run_ids) > 1 and not (len(pre) == len(docs) and all(d.get("scope") == "node" for d in pre)):
        warnings.append(f"{len(run_ids)} runs merged ({', '.join(run_ids)}): results may come from different moments")
    nodes = merge_nodes(pre)
    results = [r for d in pre for r in d.get("results", [])]
    findings = [r for r in results if r.get("level") in ("fail", "warn")]
    findings.sort(key=lambda r: (-SEVERITY[r["level"]], r.get("check", ""), r.get("summary", "")))
    for d in bench:
        if d.get("verdict") == "fail":
            findings.insert(0, {"check": "nccl-bench", "level": "fail", "nodes": [s["node"] for s in
                                (d.get("localisation") or {}).get("suspects", [])],
                                "summary": bench_failure(d), "fix": "drain the named node(s) and rerun nccl-bench "
                                "--localise; check its NICs, cables and GPUs (ddpdoctor preflight --perf)",
                                "actual": (d.get("summary") or {}).get("avg_busbw_gbs"), "expected": None})
    for d in train:
        rc = d.get("root_cause")
        if rc:
            findings.insert(0, {"check": "run-trainer", "level": "fail", "nodes": [str(rc.get("host"))],
                                "summary": f"rank {rc.get('rank')} on {rc.get('host')}: "
                                           f"{(rc.get('error_type') or rc.get('category'))}: {rc.get('message')}",
                                "fix": rc.get("fix", ""), "actual": rc.get("location"), "expected": None})
    verdicts = [d.get("verdict", "pass") for d in docs]
    return {
        "verdict": worst(verdicts) if verdicts else "pass",
        "counts": dict(Counter(r.get("level") for r in results)),
        "documents": [{"kind": d.get("kind"), "run_id": d.get("run_id"), "created": d.get("created"),
                       "verdict": d.get("verdict"), "scope": d.get("scope"), "tool_version": d.get("tool_version")}
                      for d in docs],
        "warnings": warnings,
        "findings": findings,
        "matrix": check_matrix(results, sorted(nodes)),
        "facts_diff": facts_diff(nodes),
        "clock": clock_offsets(nodes),
        "mesh": reachability(nodes),
        "bench": [bench_view(d) for d in bench],
        "trainer": [trainer_view(d) for d in train],
        "details": details(nodes, findings),
        "node_count": len(nodes),
    }


def merge_nodes(pre: list[dict]) -> dict[str, dict]:
    """Every node's facts across the preflight documents; a later document fills what an earlier lacks."""
    nodes: dict[str, dict] = {}
    for d in pre:
        for name, data in (d.get("nodes") or {}).items():
            entry = nodes.setdefault(name, {"host": data.get("host"), "addr": data.get("addr"), "facts": {}})
            for check, facts in (data.get("facts") or {}).items():
                entry["facts"].setdefault(check, facts)
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
    rows = [{"nodes": members, "count": len(members), "label": _label(members), "levels": list(key),
             "worst": worst([lv for lv in key if lv])} for key, members in groups.items()]
    rows.sort(key=lambda r: (-SEVERITY.get(r["worst"], 0), r["count"], r["label"]))
    return {"checks": checks, "rows": rows}


def _label(members: list[str]) -> str:
    if len(members) <= 3:
        return ", ".join(members)
    return f"{members[0]}, {members[1]} … {members[-1]} ({len(members)} nodes)"


def _flatten(nodes: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """The facts worth comparing, as flat key -> value per node."""
    out: dict[str, dict[str, Any]] = {}
    for name, data in nodes.items():
        f = data.get("facts") or {}
        flat: dict[str, Any] = {}
        for k, v in (f.get("torch-build") or {}).items():
            if isinstance(v, (str, int, float, bool)) and not any(s in k for s in ("path", "executable")):
                flat[f"torch-build.{k}"] = v
        for k, v in ((f.get("env-vars") or {}).get("vars") or {}).items():
            if k not in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "HOSTNAME", "CUDA_VISIBLE_DEVICES"):
                flat[f"env.{k}"] = v
        for pin in (f.get("packages") or {}).get("packages") or []:
            pkg, _, ver = str(pin).partition("==")
            flat[f"package.{pkg}"] = ver
        gpu = f.get("gpu") or {}
        if gpu:
            flat["gpu.driver_version"] = gpu.get("driver_version")
            flat["gpu.count"] = len(gpu.get("gpus") or [])
            flat["gpu.models"] = ", ".join(sorted({str(g.get("name")) for g in gpu.get("gpus") or []}))
        out[name] = flat
    return out


def facts_diff(nodes: dict[str, dict], limit: int = 200) -> list[dict]:
    """Each fact on which some node differs from the majority: the majority value and the odd nodes' values."""
    flat = _flatten(nodes)
    if len(flat) < 2:
        return []
    keys = sorted({k for f in flat.values() for k in f})
    out = []
    for key in keys:
        values = {n: f.get(key, "(missing)") for n, f in flat.items()}
        common, odd = majority(values)
        if odd:
            out.append({"fact": key, "majority": common, "majority_count": len(values) - len(odd),
                        "odd": [{"node": n, "value": values[n]} for n in odd[:32]], "odd_count": len(odd)})
        if len(out) >= limit:
            break
    return out


def clock_offsets(nodes: dict[str, dict]) -> list[dict]:
    out = []
    for name in sorted(nodes):
        f = (nodes[name].get("facts") or {}).get("clock-skew") or {}
        if f.get("offset_ms") is not None:
            out.append({"node": name, "offset_ms": f["offset_ms"], "bound_ms": f.get("bound_ms") or 0.0})
    return out


def reachability(nodes: dict[str, dict]) -> dict:
    names = sorted(nodes)
    links = {}
    for src in names:
        for p in ((nodes[src].get("facts") or {}).get("mesh") or {}).get("probes") or []:
            links[(src, p.get("peer"))] = "ok" if p.get("ok") else (p.get("error_class") or "failed")
    failed = [{"src": s, "dst": d, "class": c} for (s, d), c in sorted(links.items()) if c != "ok"]
    if not links:
        return {"nodes": [], "grid": [], "failed": [], "probed": 0}
    grid = []
    if len(names) <= MATRIX_FULL:
        grid = [[links.get((s, d), "self" if s == d else "") for d in names] for s in names]
    return {"nodes": names if grid else [], "grid": grid, "failed": failed, "probed": len(links)}


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
    return {"run": d.get("run") or {}, "summary": d.get("summary") or {}, "verdict": d.get("verdict"),
            "series": series, "expected": d.get("expected") or {}, "localisation": loc,
            "per_node": [(n, v, n in suspects) for n, v in sorted(per_node.items())],
            "median": loc.get("median_gbs"), "rows": [r for r in d.get("rows", []) if r.get("group", "all") != "all"]}


def trainer_view(d: dict) -> dict:
    metrics = d.get("metrics") or {}
    return {"config": d.get("config") or {}, "verdict": d.get("verdict"), "restarts": d.get("restarts", 0),
            "summary": d.get("metrics_summary") or {}, "root_cause": d.get("root_cause"),
            "consequences": d.get("consequences") or [], "checksums_equal": d.get("checksums_equal"),
            "loss": {f"rank {r}": [(m["step"], m.get("loss")) for m in rows] for r, rows in sorted(metrics.items())},
            "throughput": {f"rank {r}": [(m["step"], m.get("tokens_per_s")) for m in rows]
                           for r, rows in sorted(metrics.items())},
            "attempts": d.get("attempts") or [], "hang": d.get("hang"), "preflight": d.get("preflight")}


def details(nodes: dict[str, dict], findings: list[dict]) -> list[dict]:
    """Each node's facts as indented JSON, secrets scrubbed again; every node up to 16, else the notable ones."""
    notable = {n for f in findings for n in f.get("nodes") or []}
    names = sorted(nodes) if len(nodes) <= FULL_DETAIL_NODES else sorted(n for n in nodes if n in notable)[:64]
    return [{"node": n, "json": json.dumps(scrub(nodes[n].get("facts") or {}), indent=1, default=str, sort_keys=True)}
            for n in names]
