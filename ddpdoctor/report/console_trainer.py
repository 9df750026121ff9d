"""The terminal view of a run-trainer document: the verdict, and on failure one root-cause panel."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from ..rank_lists import MAX_CULPRIT_ROWS, ranks_text, total
from .values import human, phrases
from .console import T, other_node_line  # T: safe_text, then Text: another process's escapes shown, never obeyed
from . import outcome_of, wording


def render(doc: dict, console: Console) -> None:
    s = {k: human(v) for k, v in (doc.get("metrics_summary") or {}).items()}
    # `ddpdoctor postmortem` documents have no start: they describe a log dir, not a run of ours.
    start = (f"run {doc.get('run_id')}, {describe_start(doc.get('start'))}" if doc.get("start") is not None
             else f"records in {human(doc.get('logs') or ', '.join((doc.get('config') or {}).get('fr_dirs') or []))}")
    where = records_line(doc)  # one path a line
    if outcome_of.passed(doc):
        if "collectives" in s and doc.get("collectives"):
            parts = ["run-trainer: PASS", start, *collectives_line(doc["collectives"]).split(" · ")]
        else:
            parts = ["run-trainer: PASS", start, f"{s.get('steps', 0)} steps on {s.get('ranks', 0)} rank(s)",
                     f"loss {s.get('first_loss')} -> {s.get('final_loss')}", f"{s.get('tokens_per_s_mean')} tokens/s"]
            parts.append(f"checksums equal across ranks: {human(doc.get('checksums_equal'))}")
        parts.insert(len(parts) - (0 if "collectives" in s and doc.get("collectives") else 1),
                     f"restarts {human(doc.get('restarts', 0))}")
        for line in phrases(parts, console.width):  # broken between phrases only, never inside one
            console.print(T(line, style="green"), soft_wrap=True)
        for line in attempt_lines(doc) + straggler_lines(doc):
            console.print(T(line), soft_wrap=True)
        _warnings(doc, console)
        for line in where:
            console.print(T(line, style="dim"), soft_wrap=True)
        return
    root = doc.get("root_cause") or {}
    if outcome_of.state(doc) == "unverified":
        return _not_verified(doc, root, start, where, console)
    rc = {k: human(v) if k not in ("signal", "error_type", "location", "fix", "message", "exit_code") else v
          for k, v in root.items()}
    stopped_by_us = bool(doc.get("hang")) and _tool(doc) == "run-trainer"
    kind = wording.kind(rc.get("error_type"))
    rows = [T(start, style="dim"), *(T(line) for line in attempt_lines(doc)),
            T(f"rank {rc.get('rank', human(None))} (local rank {rc.get('local_rank', human(None))}) on host "
              f"{rc.get('host', human(None))} · {wording.exit_state(root, stopped_by_us)} · "
              f"{wording.root_category(root)}")]
    if kind or rc.get("error_type") or rc.get("message"):
        what = f"{kind}: " if kind else f"{rc['error_type']}: " if rc.get("error_type") else ""
        rows.append(T(f"error: {what}{wording.in_words(shown_message(rc.get('message')))}"))
    else:
        rows.append(T("error: no error message in the records read"))
    if rc.get("location"):
        func = next((c.get("function") for c in ((doc.get("hang") or {}).get("verdict") or {}).get("culprits", [])
                     if c.get("where") == rc["location"]), None)
        rows.append(T(f"where: {wording.location(rc['location'])}" + (f" in {func}" if func else "")))
    if rc.get("reason") and not root.get("victim"):
        rows.append(T(f"note: {wording.in_words(rc['reason'])}"))
    title, fix = _title_and_fix(doc, root)
    rows.append(T(f"fix: {shown_message(wording.in_words(fix), 'fix')}", style="bold"))  # 3,000 ranks: 270 lines
    rows += consequence_rows(doc)
    if doc.get("hang"):
        rows += hang_rows(doc["hang"], saved=_tool(doc) == "run-trainer")
    rows += [T(line) for line in straggler_lines(doc)]
    for line in doc.get("input_notes") or []:  # records the post-mortem skipped (a FIFO, a link out, too big)
        rows.append(T(f"note: {line}", style="dim"))
    terms = wording.terms_line([row.plain for row in rows])  # each term a newcomer meets, explained once
    if terms:
        rows.append(T(terms, style="dim"))
    console.print(Panel(Group(*rows), title=Text(f"{_tool(doc)}: FAIL — {title}", style="bold red"),
                        border_style="red"))
    for line in where:  # below the box, one a line: a path is never broken by the panel's edge
        console.print(T(line, style="dim"), soft_wrap=True)


def _warnings(doc: dict, console: Console) -> None:
    """A normal end whose data was wrong (an all_to_all split its receiver did not expect), under the PASS."""
    for w in [w for w in doc.get("warnings") or [] if isinstance(w, dict)][:16]:
        console.print(T(warning_line(w), style="yellow"), soft_wrap=True)


def warning_line(w: dict) -> str:
    at = f" at {wording.location(w['location'])}" if w.get("location") else ""
    who = f"rank {w['rank']}{at}: " if w.get("rank") is not None else ""
    return f"warning: {who}{shown_message(wording.in_words(w.get('message') or ''))}; fix: {w.get('fix') or ''}"


def _not_verified(doc: dict, root: dict, start: str, where: list[str], console: Console) -> None:
    """No failure recorded and no evidence of a normal end: what is known, in yellow, never a PASS."""
    rows = [T(start, style="dim"), *(T(line) for line in attempt_lines(doc)),
            T(wording.in_words(shown_message(root.get("message")))),
            T(f"fix: {shown_message(wording.in_words(root.get('fix') or ''), 'fix')}", style="bold")]
    rows += [T(f"note: {line}", style="dim") for line in doc.get("input_notes") or []]
    title = Text(f"{_tool(doc)}: NOT VERIFIED — no failure recorded, no normal end shown", style="bold yellow")
    console.print(Panel(Group(*rows), title=title, border_style="yellow"))
    for line in where:
        console.print(T(line, style="dim"), soft_wrap=True)


def consequence_rows(doc: dict) -> list[Text]:
    """One row per consequence the document lists; where it kept the first ones only, all of them as ranges."""
    rows = []
    for c in doc.get("consequences", []):
        how = wording.category(c.get("category")) + (f"; ended by {c['signal']}" if c.get("signal") else "")
        rows.append(T(f"consequence: rank {human(c.get('rank'))} on {human(c.get('host'))}: "
                      f"{wording.in_words(c.get('reason'))} ({how})", style="dim"))
    if total(doc, "consequences") > len(doc.get("consequences") or []):
        rows.append(T(f"consequences: {total(doc, 'consequences')} in all, rank(s) {ranks_text(doc, 'consequences')}",
                      style="dim"))
    return rows


NOTHING = "nothing to fix"  # a victim's fix: never the fix under a root-cause title


def _title_and_fix(doc: dict, root: dict) -> tuple[str, str]:
    """The panel's title and its fix. A rank shown without being named the culprit (the rank gloo aborted on a
    mismatch, one side of a tie, a rank that only lost its peer) is the first failure, not a root cause; a stop
    on request is neither. "nothing to fix" is never said under a root-cause title."""
    fix = root.get("fix") or ("none found in the records read" + (" (see the notes)" if doc.get("input_notes") else ""))
    title = outcome_of.root_title(doc)
    if title == "stopped on request":
        return title, fix
    if fix.startswith(NOTHING):
        title = "first failure, no culprit named"
        fix = ("this rank only followed another failure; no rank's own failure is in the records read: the "
               "consequences below and the logs say what each rank saw")
    return title, fix


def attempt_lines(doc: dict) -> list[str]:
    """With restarts, each attempt's outcome in one line: who failed, with what, where; the last passed or why
    it failed."""
    attempts = doc.get("attempts") or []
    if len(attempts) < 2:
        return []
    out = []
    for i, attempt in enumerate(attempts):
        rc = attempt.get("root_cause") or {}
        last = i == len(attempts) - 1
        if not rc:
            out.append(f"attempt {i + 1}: " + ("passed" if last and doc.get("verdict") == "pass"
                                               else _hung(doc, i) if last and doc.get("hang")
                                               else "no failure in its records"))
            continue
        what = wording.kind(rc.get("error_type")) or rc.get("error_type") or wording.category(rc.get("category"))
        said = f"rank {human(rc.get('rank'))}, {what}" + (f" at {wording.location(rc['location'])}"
                                                          if rc.get("location") else "")
        if rc.get("category") == "restart_connect":
            said = f"rank {human(rc.get('rank'))}: {wording.category('restart_connect')}"
        if last and doc.get("verdict") == "fail":
            out.append(f"attempt {i + 1}: failed because {said}")
        else:
            out.append(f"attempt {i + 1}: {said}" + ("; restarted" if not last else ""))
    return out


def _hung(doc: dict, attempt: int) -> str:
    """The last attempt ended in a hang: what the judge said, and torch's restart where every rank of a
    restarted attempt stands inside init_process_group."""
    verdict = (doc.get("hang") or {}).get("verdict") or {}
    said = f"hung: {verdict.get('summary') or 'no rank made progress'}"
    if attempt > 0 and verdict.get("category") == "stuck_init":
        said += " (torch's restart: the restarted ranks never finished meeting again)"
    return said


def straggler_lines(doc: dict) -> list[str]:
    """The stragglers named while the job ran (stragglers.py)."""
    out = []
    for s in doc.get("stragglers") or []:
        if s.get("sampled"):  # a send/recv-only job: named from looks at the stacks, no collective to time
            out.append(f"straggler (named live): rank {s.get('rank')}, in its own code in "
                       f"{round((s.get('last_share') or 0) * 100)}% of {s.get('sampled')} looks at its stack while "
                       "every other rank waited for a send/recv")
            continue
        x = "more than 100x" if s.get("slower_x", 0) > 100 else f"{s.get('slower_x')}x"
        out.append(f"straggler (named live): rank {s.get('rank')}, {x} slower than the others in its own code; the "
                   f"others waited {s.get('others_wait_s')} s per collective for it")
    return out


MESSAGE_SHOWN = 800  # characters of an error message in the panel (a tensor's repr can be megabytes)


def shown_message(message, what: str = "message") -> str:
    """The error message (or fix) as the panel shows it: whole up to MESSAGE_SHOWN characters, else its start and
    how much more the JSON result holds (a 100,000-character message filled 1,300 terminal lines)."""
    text = str(message or "")
    if len(text) <= MESSAGE_SHOWN:
        return text
    return f"{text[:MESSAGE_SHOWN]}… ({len(text) - MESSAGE_SHOWN:,} more characters: the whole {what} is in the JSON result)"


def render_node_line(doc: dict, console: Console) -> None:
    """A node other than node rank 0: one line (its verdict, exit code, the root cause it found, where its full
    result is), so a launcher that merges every node's output (srun) shows one full result per cluster: node
    rank 0's. Every node's run.json holds its whole result; -v prints it on every node."""
    node = doc.get("node") or {}
    rc = doc.get("root_cause") or {}
    verdict = doc.get("verdict") or "fail"
    of = f" of {node['nnodes']}" if node.get("nnodes") else ""
    head = f"run-trainer [node rank {human(node.get('node_rank'))}{of}]: "
    parts = [f"exit {human(doc.get('exit_code'))}"]
    if verdict != "pass" and rc:
        who = f"rank {rc['rank']}" if rc.get("rank") is not None else f"host {human(rc.get('host'))}"
        what = (wording.kind(rc.get("error_type")) or rc.get("error_type") or wording.category(rc.get("category"))
                if rc.get("error_type") or rc.get("category") else "failure")
        parts.append(f"root cause: {who}, {what}")
    master = "node rank 0" + (f" ({node['master_addr']})" if node.get("master_addr") else "")
    where = f"{master} printed the full result"
    if doc.get("run_json"):
        where += f"; this node's is in {doc['run_json']}"
    console.print(other_node_line(head, verdict, ", ".join(parts), where, "; -v prints it here too"), soft_wrap=True)


def _tool(doc: dict) -> str:
    """Which command wrote the document: `ddpdoctor postmortem` describes a log dir and writes no run.json."""
    return "postmortem" if (doc.get("config") or {}).get("source") == "postmortem" else "run-trainer"


def describe_start(start: dict | None) -> str:
    """How the run started, from the document's "start" (records.start_info): fresh, or resumed from a run."""
    if not start or start.get("fresh", True):
        return "started from scratch (no snapshot resumed)"
    step = start.get("step")
    return f"resumed from run {start.get('from_run')}" + (f" at step {step}" if step is not None else "")


def records_line(doc: dict) -> list[str]:
    """Where this run's records are, one full path a line (printed unbroken, below the panel): run.json (the whole
    verdict, stacks, flight recorders) and the logs (torch's per-rank stdout/stderr/error.json, torchrun's own
    output). Full, never relative: `srun` merges every node's output, and a path relative to one node's working
    directory is none to paste on another's (issue 55 U3)."""
    parts = []
    if doc.get("run_json"):
        parts.append(f"run.json: {doc['run_json']}")
    if doc.get("logs") and doc.get("start") is not None:  # a postmortem's header already names its log dir
        parts.append(f"logs: {doc['logs']}")
    return parts


def hang_rows(hang: dict, saved: bool = True) -> list[Text]:
    """What the hang watchdog saw: the collective the others wait in, every call site, which threshold fired."""
    rows = []
    verdict = hang.get("verdict") or {}
    coll = verdict.get("collective")
    culprits = verdict.get("culprits") or []
    others = culprits[1:]  # the first is the root cause's row; the others have only this one
    if total(verdict, "culprits") - 1 > MAX_CULPRIT_ROWS:  # a dump claiming 65,536 ranks: one line, as ranges
        first = culprits[0].get("rank") if isinstance(culprits[0], dict) else None
        rows.append(T(f"culprits too: rank(s) {ranks_text(verdict, 'culprits', drop=first)}"))
        others = []
    for c in others:
        rows.append(T(f"culprit too: rank {c.get('rank')} on {human(c.get('host'))}"
                         + (f" at {wording.location(c['where'])}" + (f" in {c['function']}" if c.get("function") else "")
                            if c.get("where") else "")))
    if coll:
        site = coll.get("call_site") or {}
        seq = f" #{coll['seq']}" if coll.get("seq") is not None else ""
        peer = f" with rank {coll['peer']}" if coll.get("peer") is not None else ""
        rows.append(T(f"collective: {coll['op']}{seq}{peer} (process group {coll['pg']})"
                         + (f" called at {wording.location(site['where'])} in {site.get('function')}"
                            if site.get("where") else "")
                         + f"; waiting: rank(s) {ranks_text(coll, 'waiting_ranks')}"))
        for rank, call in (coll.get("calls") or {}).items():
            rows.append(T(f"rank {rank} called {call['op']} {call['input_sizes']} {call['input_dtypes']}"
                             + (f" at {wording.location(call['where'])}" if call.get("where") else "")))
    if verdict.get("no_evidence"):
        rows.append(T(f"no flight recorder from rank(s) {ranks_text(verdict, 'no_evidence')}",
                         style="yellow"))
    ras = hang.get("ras") if isinstance(hang.get("ras"), dict) else {}
    if isinstance(ras.get("said"), str):  # NCCL RAS beside the records' verdict, or why it was not asked
        rows.append(T(ras["said"], style="yellow" if ras.get("healthy_while_disagree") else ""))
    for line in (verdict.get("notes") if isinstance(verdict.get("notes"), list) else [])[:8]:
        if isinstance(line, str):  # what the records could not tell (the send/recv sizes, a dump not left)
            rows.append(T(f"note: {line}", style="dim"))
    t = hang.get("threshold") or {}
    if t:
        rows.append(T(limit_line(t, hang.get("stalled_s")), style="dim"))
    if saved:
        rows.append(T(f"stacks of {len(hang.get('stacks', {}))} rank(s) and their flight recorders saved in run.json",
                         style="dim"))
    elif verdict.get("files"):
        rows.append(T(f"read from the flight-recorder dumps of rank(s) {', '.join(verdict['files'])}", style="dim"))
    return rows


def limit_line(t: dict, stalled_s) -> str:
    """When ddpdoctor called it a hang, in words: its own hang limit (--hang-timeout, or calibrated from the job's
    pace, and what that means), or the job's own process-group timeout that came first (hang.from_early's
    sentence, which names both)."""
    if t.get("source") == "process-group timeout" and t.get("why"):
        return f"hang limit: {wording.paths_in(t['why'])}"
    head = f"hang limit: {human(t.get('seconds'))} s without progress"
    if t.get("source") == "--hang-timeout":
        head += " (--hang-timeout)"
    elif t.get("source") == "calibrated":
        head += (" (calibrated from this job's own pace: " + str(t.get("why") or "") + "; --hang-timeout sets it)"
                 if t.get("why") else " (calibrated from this job's own pace; --hang-timeout sets it)")
    elif t.get("why") and t["why"] != f"set by {t.get('source')}":
        head += f" ({human(t.get('source'))}: {t['why']})"
    elif t.get("source"):
        head += f" ({human(t.get('source'))})"
    return head + f"; no progress for {human(stalled_s)} s"


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
