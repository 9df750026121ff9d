"""The history page's data (`ddpdoctor report --history`): each node's runs, verdicts, flapping checks and bus
bandwidth over runs, and the findings (a node slower than its own past, a check that flaps) worded with the runs
they compare. Pure: the history (ddpdoctor/history/trends.py) in, the template's model out."""
from __future__ import annotations

import os

from .common import plural

CHART_NODES = 8  # lines on one chart: the nodes with findings first, then those with the most runs
TABLE_NODES = 2000


def when(epoch: float | None) -> str:
    from ..svg import utc_text

    return utc_text(epoch, "—")


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _runs_text(stamps: list[dict]) -> str:
    if not stamps:
        return ""
    first, last = stamps[0], stamps[-1]
    if len(stamps) == 1:
        return f"run {first['run_id']} ({when(first['created'])})"
    return (f"{len(stamps)} runs from {first['run_id']} ({when(first['created'])}) to {last['run_id']} "
            f"({when(last['created'])})")


def finding_text(f: dict, root: str = "") -> dict:
    """One finding as the page and the terminal word it (``root``: the results directory its paths are in)."""
    if f["kind"] == "slower":
        title = f"{f['node']}: {f['op']} at {size_text(f['size'])} is slower than its own past"
        seen = (f"at {f['sizes']} sizes" if f.get("sizes", 1) > 1 else "in its last two runs")
        text = (f"{f['busbw_gbs']:.3g} GB/s in run {f['latest']['run_id']} ({when(f['latest']['created'])}), "
                f"{f['ratio']:.0%} of the median {f['median_gbs']:.3g} GB/s (spread ±{f.get('spread_gbs', 0):.2g}) "
                f"of its previous {_runs_text(f['past'])}; fell {seen}")
        fix = (f"compare the node's links and GPUs with a healthy node: ddpdoctor nccl-bench --localise on it and a "
               f"good neighbour; `ddpdoctor report {os.path.join(root, f['latest']['path'])}` shows the slow run")
        return {"level": "warn", "node": f["node"], "title": title, "text": text, "fix": fix}
    if f["kind"] == "drain-flap":
        title = (f"{f['node']}: drained and resumed in a loop (drained {f['drains']}×, resumed {f['resumes']}× "
                 f"{_span(f['first']['created'], f['last']['created'])})")
        text = (f"from {when(f['first']['created'])} to {when(f['last']['created'])}; drained for: "
                + " | ".join(f["reasons"] or ["—"]))
        fix = ("the drain's cause comes and goes, or what resumes the node does not re-measure it: fix what the "
               "reason names, and leave the node drained until `ddpdoctor preflight` on it passes")
        return {"level": "warn", "node": f["node"], "title": title, "text": text, "fix": fix}
    changes = ", ".join(f"{c['run_id']} ({when(c['created'])})" for c in f["changed_at"])
    title = f"{f['node']}: {f['check']} flaps ({f['changes']} changes in its last {f['window']} runs)"
    text = (f"pass/not over the runs, oldest first: {f['sequence']} (x: warn or fail); now {f['last_level']}; "
            f"last finding: {f['last_summary'] or '—'}; changed at {changes}")
    fix = f"an intermittent fault: `ddpdoctor preflight --only {f['check']}` on the node, several times"
    return {"level": "warn", "node": f["node"], "title": title, "text": text, "fix": fix}


def _span(first: float, last: float) -> str:
    minutes = max(0.0, last - first) / 60
    return f"in {minutes:.0f} min" if minutes < 120 else f"in {minutes / 60:.1f} h"


def action_rows(n: dict) -> list[dict]:
    """The node check's drains and resumes of the node, newest first: when, what, the reason whole."""
    return [{"when": when(a["created"]), "action": "▼ drained" if a["action"] == "drain" else "▲ resumed",
             "reason": a["reason"] or ("—" if a["action"] == "drain" else ""), "run": a["run_id"]}
            for a in reversed(n.get("actions") or [])]


def gap_rows(nodes: list[dict]) -> list[dict]:
    """What the node check could not do, every node, newest first: when, the node, what, why."""
    rows = [{"node": n["node"], "when": when(g["created"]), "at": g["created"], "what": g["what"], "why": g["why"],
             "run": g["run_id"]} for n in nodes for g in n.get("gaps") or []]
    return sorted(rows, key=lambda r: -r["at"])


def _bandwidth_text(bw: dict) -> str:
    parts = []
    for op, series in bw.items():
        pts = series["points"]
        if pts:
            parts.append(f"{op} {size_text(series['size'])}: {pts[0][1]:.3g} → {pts[-1][1]:.3g} GB/s "
                         f"({plural(len(pts), 'run')})")
    return "; ".join(parts)


def node_row(h: dict) -> dict:
    verdicts = " · ".join(f"{n} {v}" for v, n in sorted(h["verdicts"].items(), key=lambda kv: -kv[1]))
    return {"node": h["node"], "runs": h["runs"], "first": when(h["first"]), "last": when(h["last"]),
            "last_verdict": h["last_verdict"], "verdicts": verdicts, "contexts": ", ".join(h["contexts"]),
            "flaps": ", ".join(f"{f['check']} ({f['changes']}×)" for f in h["flaps"]),
            "drains": f"{h.get('drains', 0)} / {h.get('resumes', 0)}",
            "bandwidth": _bandwidth_text(h["bandwidth"]), "odd": bool(h["slower"] or h["flaps"])}


def charts(nodes: list[dict]) -> list[dict]:
    """Per collective: busbw over each node's runs (x: the node's run number), up to CHART_NODES lines."""
    ops: dict[str, dict[str, list]] = {}
    for h in nodes:  # already ordered: findings first
        for op, series in h["bandwidth"].items():
            lines = ops.setdefault(op, {})
            if len(lines) < CHART_NODES and len(series["points"]) > 1:
                lines[f"{h['node']} ({size_text(series['size'])})"] = [
                    (i + 1, bw) for i, (_, bw, _) in enumerate(series["points"])]
    return [{"op": op, "series": lines} for op, lines in sorted(ops.items()) if lines]


def timelines(nodes: list[dict]) -> list[dict]:
    """Per node (those with findings or drains first, up to CHART_NODES): its check states over its runs, with the
    drains and resumes, and a line saying how many."""
    out = []
    for n in sorted(nodes, key=lambda n: (not (n["slower"] or n["flaps"] or n.get("drain_flaps") or n.get("drains")),
                                          ))[:CHART_NODES]:
        t = n.get("timeline") or {}
        if t.get("runs"):
            note = (f"{plural(len(t['runs']), 'run')} from run {t['first_run']}; drained {n.get('drains', 0)}×, "
                    f"resumed {n.get('resumes', 0)}× by the node check")
            out.append({"node": n["node"], "note": note, "actions": action_rows(n), **t})
    return out


def history_view(h: dict) -> dict:
    findings = [finding_text(f, h["root"]) for f in h["findings"]]
    return {"root": h["root"], "runs": h["runs"], "files": h["files"], "left_out": h.get("left_out", 0),
            "unreadable": h.get("unreadable", 0), "read": h.get("read", 0), "node_count": len(h["nodes"]),
            "findings": findings[:300], "findings_hidden": max(0, len(findings) - 300),
            "nodes": [node_row(n) for n in h["nodes"][:TABLE_NODES]],
            "nodes_hidden": max(0, len(h["nodes"]) - TABLE_NODES), "charts": charts(h["nodes"]),
            "timelines": timelines(h["nodes"]), "gaps": gap_rows(h["nodes"])[:300],
            "rules": h["rules"]}


def console_lines(view: dict, most: int = 20) -> list[str]:
    """The terminal's summary: one line per finding (the first ``most``)."""
    notes = [plural(view["files"], "file"), f"{view['read']} read now"]
    if view["unreadable"]:
        notes.append(f"{view['unreadable']} unreadable (not ddpdoctor results, or values out of range)")
    if view["left_out"]:
        notes.append(f"the oldest {view['left_out']} left out")
    lines = [f"history of {plural(view['runs'], 'run')} on {plural(view['node_count'], 'node')} in {view['root']} "
             f"({', '.join(notes)})"]
    lines += [f"WARN {f['title']}: {f['text']}" for f in view["findings"][:most]]
    if len(view["findings"]) > most:
        lines.append(f"... {len(view['findings']) - most} more findings in the page")
    lines += [f"WARN {g['node']}: {g['what']} ({g['when']}): {g['why']}" for g in view.get("gaps", [])[:most]]
    if not view["findings"]:
        lines.append("no node slower than its own past, no check flapping, no drain/resume loop")
    return lines
