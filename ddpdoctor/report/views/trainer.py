"""The view of run-trainer documents: loss and throughput curves, the per-rank table with its odd ranks,
the run in a line, the root cause and its consequences (pure; no HTML)."""
from __future__ import annotations

from .. import outcome_of, wording
from ...numbers import parse_int
from ..values import human
from .common import _finite, single_group


def rank_table(metrics: dict) -> dict:
    """Per rank: steps, mean and worst step time, throughput, peak memory, from the metrics the run wrote
    (only the columns some rank has); a rank well off the median (slower, more memory) is marked odd."""
    def nums(rows, key):
        return [r.get(key) for r in rows if isinstance(r, dict) and _finite(r.get(key))]

    def order(rank):
        number = parse_int(rank)
        return (0, number, "") if number is not None else (1, 0, str(rank))

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


def tool_of(d: dict) -> str:
    """The command that wrote a run-trainer document: `ddpdoctor postmortem` writes the same kind (config.source)."""
    config = d.get("config") if isinstance(d.get("config"), dict) else {}
    return "postmortem" if config.get("source") == "postmortem" else "run-trainer"


def trainer_view(d: dict) -> dict:
    metrics = d.get("metrics") or {}
    summary = d.get("metrics_summary") or {}
    return {"tool": tool_of(d), "config": d.get("config") or {}, "verdict": d.get("verdict"),
            "restarts": d.get("restarts", 0),
            "summary": summary, "line": trainer_line(summary, d), "root_cause": d.get("root_cause"),
            "consequences": d.get("consequences") or [], "checksums_equal": d.get("checksums_equal"),
            "loss": {f"rank {r}": [(m["step"], m.get("loss")) for m in rows] for r, rows in sorted(metrics.items())},
            "throughput": {f"rank {r}": [(m["step"], m.get("tokens_per_s")) for m in rows]
                           for r, rows in sorted(metrics.items())},
            "ranks": rank_table(metrics), "run_id": d.get("run_id"),
            "attempts": d.get("attempts") or [], "hang": d.get("hang"), "preflight": d.get("preflight"),
            "warnings": [w for w in d.get("warnings") or [] if isinstance(w, dict)][:16],
            **root_title(d), **root_words(d)}


def root_words(d: dict) -> dict:
    """The root cause and its consequences as the report shows them: the judge's labels ("missing_rank",
    "peer_lost") in words, how the rank ended ("still running; stopped by ddpdoctor", not "exit code —"),
    as the terminal's panel says them (report/wording.py)."""
    rc = d.get("root_cause") if isinstance(d.get("root_cause"), dict) else {}
    if not rc:
        return {"root_said": None, "consequences_said": []}
    from_postmortem = (d.get("config") or {}).get("source") == "postmortem" if isinstance(d.get("config"), dict) else False
    stopped_by_us = bool(d.get("hang")) and not from_postmortem
    error = rc.get("error_type") if isinstance(rc.get("error_type"), str) else None
    said = {"ended": wording.exit_state(rc, stopped_by_us), "category": wording.root_category(rc),
            "error": wording.kind(error) or error or "", "message": wording.labels_in(str(rc.get("message") or ""))}
    consequences = [{"rank": human(q.get("rank")), "host": human(q.get("host")),
                     "reason": wording.labels_in(str(q.get("reason") or "")),
                     "how": wording.category(q.get("category")) + (f"; ended by {q['signal']}" if q.get("signal") else "")}
                    for q in d.get("consequences") or [] if isinstance(q, dict)]
    return {"root_said": said, "consequences_said": consequences}


def root_title(d: dict) -> dict:
    """What the root-cause box is called, as in the terminal's panel: a rank shown without being named the culprit
    (the rank gloo aborted on a mismatch without dumps) is the first failure, with the note that says why."""
    rc = d.get("root_cause") if isinstance(d.get("root_cause"), dict) else {}
    title = outcome_of.root_title(d).capitalize()
    note = rc.get("reason") if rc.get("reason") and rc.get("victim") is False else None
    return {"root_title": title, "root_note": note}


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
    if not out:  # a postmortem reads torchrun's logs: metrics are run-trainer's (its ranks write them)
        out.append("no training metrics recorded" if tool_of(d) == "run-trainer" else
                   "read from torchrun's logs: no training metrics there")
    restarts = d.get("restarts")
    out.append(f"restarts {restarts}" if _finite(restarts) else "restarts 0")
    for s in d.get("stragglers") or []:  # named while the job ran (forensics/live/stragglers.py)
        if isinstance(s, dict) and s.get("sampled"):  # a send/recv-only job: no collective to time
            out.append(f"straggler: rank {s.get('rank')}, in its own code while the others waited for a send/recv "
                       "(named live)")
        elif isinstance(s, dict) and _finite(s.get("slower_x")):
            out.append(f"straggler: rank {s.get('rank')}, {s['slower_x']:g}x slower in its own code (named live)")
    ce = d.get("checksums_equal")
    out.append("checksums " + ("not compared" if ce is None else "equal" if ce is True else "DIFFER"))
    return out


def trainer_finding(d: dict) -> dict | None:
    """A run's root cause as a finding of its own (rank, host, error, where, the fix), else None."""
    rc = d.get("root_cause")
    if not rc:
        return None
    return single_group({
        "check": tool_of(d), "level": "fail", "nodes": [str(rc.get("host"))],
        "summary": f"rank {human(rc.get('rank'))} on {human(rc.get('host'))}: "
                   f"{wording.kind(rc.get('error_type')) or rc.get('error_type') or wording.category(rc.get('category'))}"
                   f": {wording.labels_in(str(rc.get('message') or ''))}"
                   + (f" (at {rc['location']})" if rc.get("location") else ""),
        "fix": rc.get("fix", ""), "actual": None, "expected": None})
