"""What a node's history says (pure: runs in, data out): its runs and verdicts, its timeline of check states with
the node check's drains and resumes (when, and the reason), the checks that flap between passing and not, a
drain/resume loop, what the node check could not do (a meeting skipped, records not kept, a check that could not
run), its bus bandwidth over runs, and a finding when its latest bandwidth fell below its own past beyond its own
spread (naming the runs compared). Worded for a person in the report's views; here only numbers, names and run
ids."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .index import Run

BAD = ("warn", "fail")


@dataclass(frozen=True)
class Rules:
    flap_window: int = 20  # a node's last runs looked at for flapping
    flap_changes: int = 3  # this many changes between passing and not in the window is flapping
    slower_ratio: float = 0.8  # latest busbw under this fraction of the median of its own past
    spread_k: float = 3.0  # ... and further below that median than this many of the past's robust spreads
    past_runs: int = 10  # the past it is compared with
    min_past: int = 3  # fewer past runs: no judgement
    timeline_runs: int = 60  # a node's last runs drawn in its timeline


def _stamp(run: Run) -> dict:
    return {"run_id": run.run_id, "created": run.created, "path": run.path, "context": run.context}


def flaps(runs: list[Run], rules: Rules) -> list[dict]:
    """Checks whose state changed between passing and warn/fail at least ``flap_changes`` times in the node's last
    ``flap_window`` runs that judged them (a skip says nothing either way)."""
    by_check: dict[str, list[tuple[Run, bool]]] = {}
    for run in runs:
        for check, (level, _) in run.levels.items():
            if level != "skip":
                by_check.setdefault(check, []).append((run, level in BAD))
    out = []
    for check, seen in sorted(by_check.items()):
        window = seen[-rules.flap_window:]
        changes = [window[i][0] for i in range(1, len(window)) if window[i][1] != window[i - 1][1]]
        if len(changes) >= rules.flap_changes:
            out.append({"check": check, "changes": len(changes), "window": len(window),
                        "sequence": "".join("x" if bad else "." for _, bad in window),
                        "last_level": window[-1][0].levels[check][0],
                        "last_summary": next((r.levels[check][1] for r, bad in reversed(window) if bad), ""),
                        "changed_at": [_stamp(r) for r in changes[-6:]]})
    return out


def bandwidth(runs: list[Run]) -> dict[str, dict]:
    """Per collective: the largest message size this node measured, and its busbw run after run at that size."""
    sizes: dict[str, int] = {}
    for run in runs:
        for op, size in run.bandwidth:
            sizes[op] = max(size, sizes.get(op, 0))
    return {op: {"size": size, "points": [(r.created, r.bandwidth[(op, size)], r.run_id) for r in runs
                                          if (op, size) in r.bandwidth]}
            for op, size in sorted(sizes.items())}


def _dropped(values: list[float], rules: Rules) -> tuple[bool, float, float]:
    """(the last value fell below its past beyond the past's own spread, the past's median, that spread). The spread
    is robust (1.4826 x the median absolute deviation: one odd run does not widen it): gloo's run-to-run spread on a
    quiet node reached 21 % (issue 46), so a fixed ratio alone called a healthy run slower."""
    *past, now = values
    past = past[-rules.past_runs:]
    median = statistics.median(past)
    spread = 1.4826 * statistics.median(abs(v - median) for v in past)
    return (median > 0 and now < rules.slower_ratio * median and now < median - rules.spread_k * spread,
            median, spread)


def slower(runs: list[Run], rules: Rules) -> list[dict]:
    """Each collective whose latest busbw fell below the node's own past (``_dropped``) at two sizes or more of that
    run, or at one size in its last two runs: one size in one run is noise until seen again. Per collective, the
    size where it fell most."""
    found: dict[str, list[dict]] = {}
    sizes = {key for r in runs for key in r.bandwidth}
    for op, size in sorted(sizes):
        seen = [r for r in runs if (op, size) in r.bandwidth]
        if len(seen) < rules.min_past + 1:
            continue
        values = [r.bandwidth[(op, size)] for r in seen]
        again = len(values) >= rules.min_past + 2 and _dropped(values[:-1], rules)[0]
        # A run that fell already is no part of the past the next is judged by: it would widen the very spread the
        # next is measured against (a node that stays slow was found in no run after its first, issue 45's bench)
        dropped, median, spread = _dropped(values[:-2] + values[-1:] if again else values, rules)
        if not dropped:
            continue
        found.setdefault(op, []).append(
            {"op": op, "size": size, "busbw_gbs": values[-1], "median_gbs": median, "spread_gbs": spread,
             "ratio": values[-1] / median, "consecutive": again, "latest": _stamp(seen[-1]),
             "past": [_stamp(r) for r in seen[-1 - rules.past_runs:-1]]})
    out = []
    for op, drops in found.items():
        if len(drops) >= 2 or any(d["consecutive"] for d in drops):
            out.append(dict(min(drops, key=lambda d: d["ratio"]), sizes=len(drops)))
    return out


def timeline(runs: list[Run], rules: Rules) -> dict:
    """The node's last ``timeline_runs`` node-check and preflight runs: each check's level run by run, and the
    drains and resumes the node check did (for the page's chart)."""
    last = runs[-rules.timeline_runs:]
    checks = sorted({c for r in last for c in r.levels})
    return {"checks": checks, "first_run": len(runs) - len(last) + 1,
            "runs": [{"run_id": r.run_id, "created": r.created, "context": r.context, "verdict": r.verdict,
                      "action": r.action, "reason": r.reason, "levels": {c: lv for c, (lv, _) in r.levels.items()}}
                     for r in last]}


def actions(runs: list[Run]) -> list[dict]:
    """The node check's drains and resumes of the node, oldest first: when, the reason (whole), the run."""
    return [{"action": r.action, "reason": r.reason, **_stamp(r)} for r in runs if r.action in ("drain", "resume")]


def drain_flaps(runs: list[Run], rules: Rules) -> list[dict]:
    """A drain/resume loop: the node's last ``flap_window`` drains and resumes changed between drained and resumed
    ``flap_changes`` times or more (a drain that only brings its reason up to date is no change). What drained it
    each time, and since when."""
    done = actions(runs)[-rules.flap_window:]
    changes = sum(1 for a, b in zip(done, done[1:]) if a["action"] != b["action"])
    if changes < rules.flap_changes:
        return []
    reasons = list(dict.fromkeys(d["reason"] for d in done if d["action"] == "drain" and d["reason"]))
    return [{"check": "drain/resume", "changes": changes, "drains": sum(d["action"] == "drain" for d in done),
             "resumes": sum(d["action"] == "resume" for d in done), "first": done[0], "last": done[-1],
             "reasons": reasons[:3]}]


def node_history(node: str, runs: list[Run], rules: Rules) -> dict:
    verdicts: dict[str, int] = {}
    for r in runs:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    checks = [r for r in runs if r.kind == "preflight"]
    return {"node": node, "runs": len(runs), "first": runs[0].created, "last": runs[-1].created,
            "last_verdict": (checks or runs)[-1].verdict, "verdicts": verdicts,
            "contexts": sorted({r.context for r in runs}), "flaps": flaps(checks, rules),
            "bandwidth": bandwidth(runs), "slower": slower(runs, rules), "timeline": timeline(checks, rules),
            "drains": sum(r.action == "drain" for r in checks), "resumes": sum(r.action == "resume" for r in checks),
            "actions": actions(checks)[-rules.timeline_runs:], "drain_flaps": drain_flaps(checks, rules),
            "gaps": [{"what": what, "why": why, **_stamp(r)} for r in runs for what, why in r.gaps]}


def history(all_runs: list[Run], rules: Rules = Rules()) -> dict:
    """Every node's history, the nodes with findings first; ``findings``: one per slower collective and per
    flapping check, across nodes, slower first."""
    by_node: dict[str, list[Run]] = {}
    for run in sorted(all_runs, key=lambda r: (r.created, r.path)):
        by_node.setdefault(run.node, []).append(run)
    nodes = [node_history(n, rs, rules) for n, rs in by_node.items()]
    nodes.sort(key=lambda h: (-(len(h["slower"]) * 10 + len(h["flaps"]) + len(h["drain_flaps"])), -h["drains"],
                              h["node"]))
    findings = [{"kind": "slower", "node": h["node"], **s} for h in nodes for s in h["slower"]]
    findings += [{"kind": "drain-flap", "node": h["node"], **f} for h in nodes for f in h["drain_flaps"]]
    findings += [{"kind": "flap", "node": h["node"], **f} for h in nodes for f in h["flaps"]]
    return {"nodes": nodes, "findings": findings, "runs": len(all_runs),
            "rules": {"flap_window": rules.flap_window, "flap_changes": rules.flap_changes,
                      "slower_ratio": rules.slower_ratio, "spread_k": rules.spread_k, "past_runs": rules.past_runs,
                      "min_past": rules.min_past}}
