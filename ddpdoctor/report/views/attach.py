"""The view of `attach` documents: the job, the verdict (culprit rank, host, file:line, the fix) as a finding of
its own, and one row per rank read (what it waits in, where it stands, whether it moved) (pure; no HTML)."""
from __future__ import annotations

from ...rank_lists import ranks_text, total
from .. import wording
from ..values import human
from .common import single_group


def _class_in_words(label) -> str:
    """The judge's class ("missing_rank") as the report says it ("never reached the collective ...")."""
    return wording.kind(label) or wording.category(label) if label else ""


def _what(wait: dict | None) -> str:
    wait = wait or {}
    kind = wait.get("kind")
    if kind in ("send", "recv"):
        return f"{wait.get('op') or kind}({'dst' if kind == 'send' else 'src'}={human(wait.get('peer'))})"
    if kind == "none":
        return "its own code"
    if wait.get("library"):
        return f"{wait['library']}: {wait.get('op') or kind}" + ("" if wait.get("certain", True) else "?")
    return str(wait.get("op") or kind or "?")


def attach_view(d: dict) -> dict:
    diag = d.get("diagnosis") or {}
    job = d.get("job") or {}
    rows = [{"rank": r.get("rank"), "host": r.get("host"), "pid": r.get("pid"),
             "in": f"not read: {r.get('error')}" if r.get("failure") else _what(r.get("wait")),
             "where": r.get("where") or "", "function": r.get("function") or "",
             "moved": {True: "yes", False: "no"}.get(r.get("moved"), "—")}
            for r in (d.get("ranks") or []) if isinstance(r, dict)]
    return {"verdict": d.get("verdict"), "host": d.get("host"), "job": job.get("id"),
            "launcher": job.get("launcher"), "world_size": job.get("world_size"),
            "category": _class_in_words(diag.get("category")), "summary": wording.labels_in(diag.get("summary")),
            "fix": diag.get("fix"),
            "culprits": [c for c in diag.get("culprits") or [] if isinstance(c, dict)],
            "all_culprits": ranks_text(diag, "culprits") if total(diag, "culprits") > len(diag.get("culprits") or [])
            else "", "elsewhere": ranks_text(job, "ranks_elsewhere"), "ranks": rows, "run_id": d.get("run_id"),
            "notes": [n for n in (d.get("notes") if isinstance(d.get("notes"), list) else [])[:50] if isinstance(n, str)]}


def attach_finding(d: dict) -> dict | None:
    """A hang or desync attach found (fail), or a job where no rank moved and the rounds could not tell a long
    step from a hang (warn), as a finding of its own (culprit rank, host, where, the fix), else None."""
    diag = d.get("diagnosis") or {}
    if d.get("verdict") not in ("fail", "warn"):
        return None
    culprits = [c for c in diag.get("culprits") or [] if isinstance(c, dict)]
    where = "; ".join(f"rank {human(c.get('rank'))} on {human(c.get('host'))}"
                      + (f" at {c['where']}" if c.get("where") else "") for c in culprits)
    return single_group({
        "check": "attach", "level": d.get("verdict"),
        "nodes": sorted({str(c.get("host")) for c in culprits}) or [str(d.get("host"))],
        "summary": f"{_class_in_words(diag.get('category'))}: {wording.labels_in(diag.get('summary'))}"
                   + (f" ({where})" if where else ""),
        "fix": diag.get("fix", ""), "actual": None, "expected": None})
