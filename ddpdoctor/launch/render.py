"""The terminal view of a run-trainer document: the verdict, and on failure one root-cause panel."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from ..report.console import T  # safe_text, then Text: another process's escapes shown, never obeyed


def render(doc: dict, console: Console) -> None:
    from .records import describe_start

    s = doc.get("metrics_summary") or {}
    # `ddpdoctor postmortem` documents have no start: they describe a log dir, not a run of ours.
    start = (f"run {doc.get('run_id')}, {describe_start(doc.get('start'))}" if doc.get("start") is not None
             else f"records in {doc.get('logs')}")
    if doc.get("verdict") == "pass" and "collectives" in s and doc.get("collectives"):
        console.print(T(f"run-trainer: PASS · {start} · {collectives_line(doc['collectives'])} · "
                           f"restarts {doc.get('restarts', 0)}", style="green"))
        return
    if doc.get("verdict") == "pass":
        line = (f"run-trainer: PASS · {start} · {s.get('steps', 0)} steps on {s.get('ranks', 0)} rank(s) · loss "
                f"{s.get('first_loss')} -> {s.get('final_loss')} · {s.get('tokens_per_s_mean')} tokens/s · "
                f"restarts {doc.get('restarts', 0)} · checksums equal: {doc.get('checksums_equal')}")
        console.print(T(line, style="green"))
        return
    rc = doc.get("root_cause") or {}
    rows = [
        T(start, style="dim"),
        T(f"rank {rc.get('rank')} (local rank {rc.get('local_rank')}) on host {rc.get('host')}"
             f" · exit code {rc.get('exit_code')}" + (f" · {rc.get('signal')}" if rc.get("signal") else "")
             + f" · {rc.get('category')}"),
        T(f"error: {rc.get('error_type') + ': ' if rc.get('error_type') else ''}{rc.get('message') or ''}"),
    ]
    if rc.get("location"):
        func = next((c.get("function") for c in ((doc.get("hang") or {}).get("verdict") or {}).get("culprits", [])
                     if c.get("where") == rc["location"]), None)
        rows.append(T(f"where: {rc['location']}" + (f" in {func}" if func else "")))
    rows.append(T(f"fix: {rc.get('fix') or ''}", style="bold"))
    for c in doc.get("consequences", []):
        rows.append(T(f"consequence: rank {c.get('rank')} on {c.get('host')}: {c.get('reason')} "
                         f"({c.get('category')}{': ' + c['signal'] if c.get('signal') else ''})", style="dim"))
    if doc.get("hang"):
        rows += hang_rows(doc["hang"])
    for line in doc.get("input_notes") or []:  # records the post-mortem skipped (a FIFO, a link out, too big)
        rows.append(T(f"note: {line}", style="dim"))
    console.print(Panel(Group(*rows), title=Text("run-trainer: FAIL — root cause", style="bold red"),
                        border_style="red"))


def hang_rows(hang: dict) -> list[Text]:
    """What the hang watchdog saw: the collective the others wait in, every call site, which threshold fired."""
    rows = []
    verdict = hang.get("verdict") or {}
    coll = verdict.get("collective")
    if coll:
        site = coll.get("call_site") or {}
        rows.append(T(f"collective: {coll['op']} #{coll['seq']} (process group {coll['pg']})"
                         + (f" called at {site['where']} in {site.get('function')}" if site.get("where") else "")
                         + f"; waiting: rank(s) {', '.join(map(str, coll.get('waiting_ranks', [])))}"))
        for rank, call in (coll.get("calls") or {}).items():
            rows.append(T(f"rank {rank} called {call['op']} {call['input_sizes']} {call['input_dtypes']}"
                             + (f" at {call['where']}" if call.get("where") else "")))
    if verdict.get("no_evidence"):
        rows.append(T(f"no flight recorder from rank(s) {', '.join(map(str, verdict['no_evidence']))}",
                         style="yellow"))
    t = hang.get("threshold") or {}
    if t:
        rows.append(T(f"threshold: {t.get('seconds')} s ({t.get('source')}: {t.get('why')}); no progress for "
                         f"{hang.get('stalled_s')} s", style="dim"))
    rows.append(T(f"stacks of {len(hang.get('stacks', {}))} rank(s) and their flight recorders saved in run.json",
                     style="dim"))
    return rows


def collectives_line(summary: dict) -> str:
    """A user script's progress: collectives completed per rank, how often, and the straggler if any."""
    ranks = summary.get("ranks") or {}
    done = [r["completed"] for r in ranks.values() if r.get("completed") is not None]
    gaps = [r["interval_s_median"] for r in ranks.values() if r.get("interval_s_median") is not None]
    line = f"{max(done) if done else 0} collectives on {len(ranks)} rank(s)"
    if gaps:
        line += f", one every {sorted(gaps)[len(gaps) // 2]:.3g} s"
    st = summary.get("straggler")
    if st:
        line += (f" · straggler: rank {st['rank']} enters collectives {st['late_s_median']:.3g} s after the first "
                 f"(median of {st['collectives']}; the others {st['others_s_median']:.3g} s)")
    return line
