"""run-trainer's end decided: the root cause and its consequences of a job run-trainer ran, from what it left
(the post-mortem of its logs, the flight records at exit), the watchdog's hang report, or the interruption."""
from __future__ import annotations

import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from ...grouping import rank_ranges
from ..evidence import job_files
from ..evidence.model import RankFailure, is_library
from ..judge import attribution, nccl_timeout
from ..judge.classify import FRAME, SIGNALS
from ..judge.verdict import Findings
from . import analysis


@dataclass
class End:
    """How the run ended, as the forensics decide it (what run.json says of the failure)."""
    verdict: Findings
    failed: bool
    root: dict | None
    consequences: list[dict] = field(default_factory=list)
    culprit_ranks: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)  # a normal end whose data was wrong (judge.sizes.warning)


def decide(code: int, agent_stderr: str, logs: Path, run_dir: Path, hang_report: dict | None,
           interrupted: int | None) -> End:
    """``code``: torchrun's exit code (0: every worker succeeded, the evidence of a normal end); ``hang_report``:
    the watchdog's, when it stopped the job; ``interrupted``: the signal run-trainer itself received."""
    with job_files.reading(run_dir) as notes:  # the run's records: every node's logs, the flight-recorder dumps
        verdict = analysis.analyse(logs, agent_stderr, socket.gethostname())
        if not hang_report and code != 0 and not interrupted:  # after a stop the dumps show the stop, not a hang
            adopt_exit_dumps(verdict, run_dir)
            adopt_call_sizes(verdict, run_dir)
        hung_at_stop = stopped_while_hung(verdict, run_dir, interrupted) if interrupted and not hang_report else None
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
    culprits = (([c["rank"] for c in (hang_report.get("verdict") or {}).get("culprits", [])]
                 if hang_report and root and root.get("category") == "hang" else [])
                or attribution.culprit_ranks(root, consequences)) if failed else []
    warnings = [] if failed else size_warnings(run_dir)
    return End(verdict, failed, root, consequences, culprits, notes, warnings)


def adopt_exit_dumps(verdict: Findings, run_dir: Path) -> None:
    """A job that failed without a hang (a collective mismatch gloo aborts at once): the flight records the
    ranks wrote as they ended (at exit, or on the launcher's SIGTERM) say whose call differs from the majority's,
    or who was behind; attribution.adopt decides whether they outrank the first failure."""
    from ..evidence.fr_dumps import find_dumps
    from ..judge.dumps import judge_dumps

    hang = judge_dumps(find_dumps([run_dir / "flight_recorder"]), verdict.failures, run_dir / "stacks" / "sigterm",
                       verdict.world)
    attribution.adopt(verdict, hang)


def adopt_call_sizes(verdict: Findings, run_dir: Path) -> None:
    """A mismatch gloo aborted the receiver on: the sizes the ranks kept (Python 3.12+) say who sent what;
    judge.sizes decides whose size is the odd one and whether it outranks the first failure."""
    from ..evidence.call_sizes import FOLDER, read_dir
    from ..judge import sizes

    if verdict.root_cause is not None and verdict.root_cause.category == "desync":
        sizes.adopt(verdict, sizes.find(read_dir(run_dir / FOLDER)))


def size_warnings(run_dir: Path) -> list[dict]:
    """A job that ended normally: an all_to_all whose splits its receiver did not expect (the kept sizes, Python
    3.12+) is said, the end still a pass (its evidence is a normal end)."""
    from ..evidence.call_sizes import FOLDER, read_dir
    from ..judge import sizes

    with job_files.reading(run_dir):
        found = sizes.unnoticed(read_dir(run_dir / FOLDER))
    return [sizes.warning(found)] if found else []


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


def stopped_while_hung(verdict: Findings, run_dir: Path, signum: int) -> dict | None:
    """A stop (a scheduler's time limit, scancel) that came while the job was hung before the watchdog's
    threshold: the flight records the ranks wrote at the SIGTERM hold a collective pending STALLED_S or more; the
    rank their verdict names (with the SIGTERM stacks) is the root cause, else none. None: no sign of a hang."""
    from ..evidence.fr_dumps import find_dumps, stalled_s
    from ..judge.dumps import judge_dumps
    from ..judge.policy import STALLED_S
    from ..judge.stopped import STOPPED_FIX_TRAINER, stopped_from_outside

    dumps = find_dumps([run_dir / "flight_recorder"])
    stalled = stalled_s(dumps)
    if stalled is None or stalled < STALLED_S:
        return None
    hang = judge_dumps(dumps, verdict.failures, run_dir / "stacks" / "sigterm", verdict.world)
    hung = Findings(root_cause=None)
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
    if root.get("error_type") in nccl_timeout.ERROR_TYPES:  # the ranks aborted on NCCL's own timeout first
        return True
    if root["category"] == "signal":
        return root.get("signal") not in STOP_SIGNALS
    return root["category"] not in STOP_MARKS
