"""The run-trainer document of a finished job (run.json): the post-mortem's root cause and consequences,
or the hang watchdog's, or the interruption's; the metrics the ranks wrote and their summary; checksums.

Pure reading of what the job left (through ``postmortem`` and ``evidence_io``); running the job is ``run``'s.
"""
from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

from .. import documents
from ..exitcodes import ExitCode
from ..grouping import rank_ranges
from ..forensics.judge import attribution
from ..forensics.evidence import job_files
from ..forensics.judge.classify import FRAME, SIGNALS, RankFailure, Verdict
from ..forensics.postmortem import analysis
from . import records
from .config import TrainerConfig, resumed_run
from ..forensics.evidence.model import is_library


MAX_POINTS = 500


def blame_the_disk(doc: dict, problems: list[str], run_dir: Path) -> None:
    """A failure whose records say nothing, on a run dir that could not be written: the full disk is the
    likely cause (the ranks' logs and error files were lost the same way), so the root cause says so."""
    rc = doc.get("root_cause")
    if not rc or rc.get("message") or rc.get("category") not in ("unknown", None):
        return
    rc["message"] = f"the ranks left no readable record, and {problems[0]}"
    rc["fix"] = (f"free space where --run-dir points ({run_dir}) or point --run-dir at a disk with room, then "
                 "rerun: the ranks' logs, error files and run.json are written there")


def read_metrics(run_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted((run_dir / "metrics").glob("rank*.jsonl")):
        rows = []
        for line in job_files.read_text(path).splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        stride = max(1, len(rows) // MAX_POINTS)
        out[path.stem[4:]] = rows[::stride] if stride > 1 else rows
    return out


def metrics_summary(metrics: dict[str, list[dict]]) -> dict:
    if not metrics:
        return {}
    rank0 = metrics.get("0") or next(iter(metrics.values()))
    per_rank_tps = [sum(r["tokens_per_s"] for r in rows) / len(rows) for rows in metrics.values() if rows]
    steps = [r["step_time_s"] for rows in metrics.values() for r in rows]
    return {
        "steps": max((r["step"] for rows in metrics.values() for r in rows), default=0),
        "first_loss": rank0[0]["loss"] if rank0 else None,
        "final_loss": rank0[-1]["loss"] if rank0 else None,
        "tokens_per_s_mean": round(sum(per_rank_tps), 1),  # the job's throughput: every rank's share added
        "step_time_s_mean": round(sum(steps) / len(steps), 5) if steps else None,
        "peak_mem_bytes": max((r.get("peak_mem_bytes") or 0 for rows in metrics.values() for r in rows), default=0),
        "ranks": len(metrics),
    }


def collectives_summary(summary: dict) -> dict:
    ranks = summary.get("ranks") or {}
    done = [r["completed"] for r in ranks.values() if r.get("completed") is not None]
    gaps = sorted(r["interval_s_median"] for r in ranks.values() if r.get("interval_s_median") is not None)
    straggler = summary.get("straggler") or {}
    return {"collectives": max(done) if done else 0, "collective_interval_s": gaps[len(gaps) // 2] if gaps else None,
            "ranks": len(ranks), "straggler_rank": straggler.get("rank"),
            "straggler_late_s": straggler.get("late_s_median")}


def checksums(run_dir: Path) -> bool | None:
    path = run_dir / "checksums.jsonl"
    if not path.exists():
        return None
    rows = []
    for line in job_files.read_text(path).splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut by a rank that died mid-write
            continue
    return all(isinstance(r, dict) and r.get("equal") for r in rows) if rows else None


def adopt_exit_dumps(verdict: Verdict, run_dir: Path) -> None:
    """A job that failed without a hang (a collective mismatch gloo aborts at once): the flight records the
    ranks wrote as they ended (at exit, or on the launcher's SIGTERM) say whose call differs from the majority's,
    or who was behind; attribution.adopt decides whether they outrank the first failure."""
    from ..forensics.evidence.fr_dumps import find_dumps
    from ..forensics.judge.dumps import judge_dumps

    hang = judge_dumps(find_dumps([run_dir / "flight_recorder"]), verdict.failures, run_dir / "stacks" / "sigterm",
                       verdict.world)
    attribution.adopt(verdict, hang)


def stacks_on_file(root: dict | None, folder: Path) -> None:
    """A fix true to the files present: where it says the rank's stack is not in the logs while the bootstrap
    wrote it at the launcher's SIGTERM, it names that file instead (relative to the run's records)."""
    if not root or root.get("rank") is None or attribution.NO_STACK not in (root.get("fix") or ""):
        return
    path = folder / f"rank{root['rank']}.txt"
    try:
        present = path.stat().st_size > 0
    except OSError:
        return
    if present:
        root["fix"] = root["fix"].replace(attribution.NO_STACK, f"its stack when the launcher stopped it is in "
                                                                  f"{path.parent.parent.name}/sigterm/{path.name} "
                                                                  "beside run.json")


def _agent_failure(code: int, agent_stderr: str, logs: Path) -> dict:
    """No rank left a record: torchrun itself ended. Killed by a signal from outside (its workers die with it),
    or it exited with a code its own output explains."""
    tail = "\n".join(agent_stderr.splitlines()[-30:])
    if code < 0:
        name = SIGNALS.get(-code, f"signal {-code}")
        return RankFailure(
            rank=None, local_rank=None, host=socket.gethostname(), exit_code=code, signal=name, category="signal",
            message=f"torchrun (the launcher) was killed by {name} from outside; its ranks were stopped with it",
            fix=("find who sent it: the kernel's OOM killer (`dmesg | grep -i -e oom -e killed`), the scheduler's "
                 "limits, or a `kill`" if -code == 9 else f"find who sent {name} to torchrun"),
            log_tail=tail).to_json()
    return RankFailure(
        rank=None, local_rank=None, host=socket.gethostname(), exit_code=code,
        message=f"torchrun exited with code {code} and no rank left an error record",
        fix=f"read torchrun's own output in {logs / 'agent.stderr.log'}", log_tail=tail).to_json()


def hang_root_cause(report: dict) -> dict:
    verdict = report.get("verdict") or {}
    culprits = verdict.get("culprits") or []
    ranks = [c["rank"] for c in culprits] or report.get("stalled_ranks") or []
    threshold = report.get("threshold") or {}
    first = culprits[0] if culprits else {}
    if verdict:
        message = f"{verdict['summary']} ({_past_the_limit(report['stalled_s'], threshold)})"
    else:
        who = f"rank(s) {rank_ranges(ranks)}" if ranks else "no single rank (all stopped together)"
        message = f"no rank made progress for {report['stalled_s']:.0f} s; behind the others: {who}"
    return RankFailure(
        rank=ranks[0] if ranks else None, host=first.get("host") or socket.gethostname(),
        local_rank=(report.get("local_ranks") or {}).get(str(ranks[0])) if ranks else None,
        exit_code=None, category="hang", error_type=verdict.get("class", "Hang"), message=message,
        location=first.get("where") or _hang_location(report, ranks),
        traceback="\n".join(f"--- rank {r} ---\n{s}" for r, s in report.get("stacks", {}).items()),
        fix=verdict.get("fix") or "look at the stack of the rank(s) behind: a rank that never reaches the "
            "collective the others wait in (a data loader stall, a rank-dependent branch, a deadlock) hangs the job",
    ).to_json()


def _past_the_limit(stalled_s: float, threshold: dict) -> str:
    """Why this is a hang, in a clause: how long nothing moved, and which limit that passed."""
    seconds, source = threshold.get("seconds"), threshold.get("source")
    if source == "process-group timeout":
        return f"no progress for {stalled_s:.0f} s, and the job's own process-group timeout ({seconds:g} s) was expiring"
    if source == "--hang-timeout":
        return f"no progress for {stalled_s:.0f} s, past --hang-timeout {seconds:g} s"
    return f"no progress for {stalled_s:.0f} s, past the {seconds} s hang limit calibrated from the job's own pace"


def _hang_location(report: dict, ranks: list[int]) -> str | None:
    """Without a verdict (no flight recorder answered): the innermost user frame of a stalled rank's stack."""
    for r in ranks:
        frames = FRAME.findall(report.get("stacks", {}).get(str(r), ""))
        for file, line, _ in frames:  # faulthandler prints the innermost frame first
            if not is_library(file):
                return f"{file}:{line}"
    return None


def hang_consequences(report: dict) -> list[dict]:
    """The ranks that waited for the culprit, each with where it waited."""
    verdict = report.get("verdict") or {}
    coll = verdict.get("collective") or {}
    culprits = rank_ranges(c["rank"] for c in verdict.get("culprits", []))

    def waited(c: dict) -> str:  # each rank's own op: a barrier's waiters and an all_reduce's are not the same
        if c.get("waited_in"):
            return f"waited in {c['waited_in']}"
        return f"waited in {coll['op']} #{coll['seq']}" if coll else "waited"

    local = report.get("local_ranks") or {}
    return [RankFailure(rank=c["rank"], local_rank=local.get(str(c["rank"])), host=c.get("host"), exit_code=None,
                                   category="hang", location=c.get("where"), victim=True,
                                   reason=waited(c) + (f" for rank(s) {culprits}" if culprits else "")
                                   + (f" at {c['where']}" if c.get("where") else ""),
                                   fix="nothing to fix on this rank: see the root cause").to_json()
            for c in verdict.get("consequences", [])]


def stopped_while_hung(verdict: Verdict, run_dir: Path, signum: int) -> dict | None:
    """A stop (a scheduler's time limit, scancel) that came while the job was hung before the watchdog's
    threshold: the flight records the ranks wrote at the SIGTERM hold a collective pending STALLED_S or more; the
    rank their verdict names (with the SIGTERM stacks) is the root cause, else none. None: no sign of a hang."""
    from ..forensics.evidence.fr_dumps import find_dumps, stalled_s
    from ..forensics.judge.dumps import judge_dumps
    from ..forensics.judge.stopped import STALLED_S, STOPPED_FIX_TRAINER, stopped_from_outside

    dumps = find_dumps([run_dir / "flight_recorder"])
    stalled = stalled_s(dumps)
    if stalled is None or stalled < STALLED_S:
        return None
    hang = judge_dumps(dumps, verdict.failures, run_dir / "stacks" / "sigterm", verdict.world)
    hung = Verdict(root_cause=None)
    stopped_from_outside(hung, hang, stalled, signal.Signals(signum).name, fix=STOPPED_FIX_TRAINER)
    return hung.root_cause.to_json() if hung.root_cause else None


def interrupted_root(signum: int) -> dict:
    name = signal.Signals(signum).name
    return RankFailure(
        rank=None, local_rank=None, host=socket.gethostname(), exit_code=128 + signum, signal=name,
        category="interrupted", message=f"run-trainer received {name}: torchrun and every worker were stopped",
        fix="nothing to fix: the run was stopped on request (continue it with --resume RUN_ID)").to_json()


# What a stop on request leaves behind by itself: the signal's own marks, a rank that lost its peer as the stop
# ended it, and a post-mortem's hang guess from ranks the stop ended one by one (a signal: STOP_SIGNALS).
STOP_MARKS = ("unknown", "stopped", "peer_lost", "consequence", "hang")
# The signals a stop sends (SIGKILL: to a rank still there after the grace); a SIGSEGV or SIGABRT came of itself.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", None)


def _said_before(root: dict | None) -> bool:
    """A real failure that says what it is, not one the signal itself caused (KeyboardInterrupt, SIGTERM)."""
    if not root or root["victim"]:
        return False
    if root["category"] == "signal":
        return root.get("signal") not in STOP_SIGNALS
    return root["category"] not in STOP_MARKS


def build_document(cfg: TrainerConfig, code: int, agent_stderr: str, logs: Path, wall: float,
                   hang_report: dict | None, interrupted: int | None = None) -> dict:
    run_dir = cfg.records()
    with job_files.reading(run_dir) as notes:  # the run's records: every node's logs, the flight-recorder dumps
        verdict = analysis.analyse(logs, agent_stderr, socket.gethostname())
        if not hang_report and code != 0 and not interrupted:  # after a stop the dumps show the stop, not a hang
            adopt_exit_dumps(verdict, run_dir)
        hung_at_stop = stopped_while_hung(verdict, run_dir, interrupted) if interrupted and not hang_report else None
    metrics = read_metrics(run_dir)
    root = verdict.root_cause.to_json() if verdict.root_cause else None
    consequences = [f.to_json() for f in verdict.consequences]
    # A rank that failed of its own as the job stalled (an exception, a C++ abort on a collective mismatch) is
    # the cause; not so a signal (the watchdog's own SIGKILL after the grace) or a collective timeout.
    if hang_report and root and not root["victim"] and root["category"] not in ("unknown", "signal", "timeout", "hang"):
        pass
    elif hang_report:
        if root:
            consequences.insert(0, dict(root, victim=True, reason="stopped by the hang watchdog"))
        root = hang_root_cause(hang_report)
        consequences = hang_consequences(hang_report) or consequences
    elif interrupted and not _said_before(root):
        # Only a real failure that came before the signal stays the root cause; the rest followed the signal.
        if root:
            consequences.insert(0, dict(root, victim=True, reason="stopped after run-trainer was interrupted"))
        root = hung_at_stop or interrupted_root(interrupted)
    failed = code != 0 or hang_report is not None or interrupted is not None
    stacks_on_file(root, run_dir / "stacks" / "sigterm")
    if failed and root is None:
        root = _agent_failure(code, agent_stderr, logs)
    exit_code = 128 + interrupted if interrupted else ExitCode.FAIL if failed else ExitCode.OK
    return documents.envelope(
        "run-trainer",
        run_id=cfg.rendezvous_id(),
        config=cfg.to_json(),
        verdict="fail" if failed else "pass",
        exit_code=exit_code,
        interrupted=signal.Signals(interrupted).name if interrupted else None,
        start=records.start_info(run_dir, resumed_run(cfg)),
        torchrun_exit_code=code,
        restarts=max(0, len(verdict.attempts) - 1),
        attempts=verdict.attempts,
        wall_s=round(wall, 2),
        metrics=metrics,
        metrics_summary=metrics_summary(metrics),
        checksums_equal=checksums(run_dir),
        root_cause=root if failed else None,
        consequences=consequences if failed else [],
        culprit_ranks=(([c["rank"] for c in (hang_report.get("verdict") or {}).get("culprits", [])]
                        if hang_report and root and root.get("category") == "hang" else [])
                       or attribution.culprit_ranks(root, consequences)) if failed else [],
        hang=hang_report,
        logs=str(logs),
        node=records.node_of(logs),  # node rank 0 prints the full result; the others one line (trainer_cmd)
        input_notes=notes,
        preflight=None,
    )
