"""The rules a finished job's end is decided by (judge/decide.py is their only caller): the watchdog's hang as the
root cause, a stop on request, torchrun's own end when no rank left a record, a fix true to the stack files
present, and the dumps' verdict when they are all a postmortem was given. Each takes the evidence a collector gathered and returns records; none reads a file."""
from __future__ import annotations

import signal
import socket

from ...grouping import rank_ranges
from ..evidence.model import RankFailure, is_library
from . import attribution, nccl_timeout
from .classify import FRAME, SIGNALS
from .dumps import Judged
from .failure_words import NOTHING_TO_FIX
from .verdict import Findings


STACKS = "stacks/sigterm"  # where the bootstrap writes a rank's stack at the launcher's SIGTERM (beside run.json)


def stack_on_file(root: dict | None, stacks: frozenset[int]) -> None:
    """A fix true to the files present: where it says the rank's stack is not in the logs while the bootstrap
    wrote it at the launcher's SIGTERM (``stacks``: the ranks whose stack file is there), it names that file."""
    if not root or root.get("rank") not in stacks or attribution.NO_STACK not in (root.get("fix") or ""):
        return
    root["fix"] = root["fix"].replace(attribution.NO_STACK, f"its stack when the launcher stopped it is in "
                                                              f"{STACKS}/rank{root['rank']}.txt beside run.json")


def agent_failure(code: int, agent_stderr: str, logs: str) -> dict:
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
        fix=f"read torchrun's own output in {logs}/agent.stderr.log", log_tail=tail).to_json()


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
                        + (f" at {c['where']}" if c.get("where") else ""), fix=NOTHING_TO_FIX).to_json()
            for c in verdict.get("consequences", [])]


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


def said_before(root: dict | None) -> bool:
    """A real failure that says what it is, not one the signal itself caused (KeyboardInterrupt, SIGTERM)."""
    if not root or root["victim"]:
        return False
    if root.get("error_type") in nccl_timeout.ERROR_TYPES:  # the ranks aborted on NCCL's own timeout first
        return True
    if root["category"] == "signal":
        return root.get("signal") not in STOP_SIGNALS
    return root["category"] not in STOP_MARKS


def dumps_alone(findings: Findings, hang: Judged | None, ranks: list[int]) -> None:
    """`postmortem --fr-dir` without the job's logs (dumps copied off a cluster): the rank the dumps name is the
    root cause, each other rank they name a culprit too; dumps that name none say what they show and that without
    the logs nothing says how the job ended (not verified). ``ranks``: the ranks whose dumps were read."""
    named = [c for c in hang.culprits if c.named] if hang and hang.verdict.no_culprit is None else []
    if not named:
        said = hang.summary() if hang else "no verdict"
        findings.root_cause = RankFailure(
            rank=None, local_rank=None, host=None, exit_code=None, category="unverified", error_type="not_verified",
            message=(f"the flight-recorder dumps of rank(s) {rank_ranges(ranks)} name no rank ({said}); without "
                     "the job's logs nothing says how it ended: not verified"),
            fix="give `ddpdoctor postmortem` the job's torchrun log dir too (DIR, with --fr-dir), or rerun under "
                "`ddpdoctor run-trainer`")
        return
    findings.root_cause = _dumps_culprit(hang, named[0])
    findings.consequences = [_dumps_culprit(hang, c, first=named[0].rank) for c in named[1:]]


def _dumps_culprit(hang: Judged, culprit, first: int | None = None) -> RankFailure:
    """A rank the dumps name, as a record (its place: where its record or stack stands); ``first``: the root
    cause's rank, when this one is a culprit beside it."""
    place = hang.place(culprit)
    where = place.get("where")
    failure = RankFailure(rank=culprit.rank, local_rank=None, host=place.get("host"), exit_code=None,
                          category="hang", error_type=hang.legacy_class,
                          message=("likely: " if hang.verdict.likely else "") + hang.summary(),
                          location=where if isinstance(where, str) else None, fix=hang.fix())
    if first is not None:
        failure.victim, failure.named = False, True
        failure.reason = f"culprit too ({hang.legacy_class}): see the root cause (rank {first})"
    return failure
