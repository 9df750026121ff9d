"""Who the others waited for, from what a finished job left: the ranks' errors and, when there are some, their
flight-recorder dumps. A rank that timed out inside a collective waited; it is never the root cause.

- ``judge``: the root cause is the earliest failure that is not a consequence, everything else a consequence;
- ``refine_timeouts``: a timed-out rank's fix, with its own process-group timeout (never advising a
  --hang-timeout above it);
- ``blame_the_absent``: no dump: the ranks that never timed out and were stopped by the launcher are the likely
  culprits; every rank timed out: the one whose call differs from the majority's, else the collective itself;
- ``adopt``: dumps judged (collectives.judge): their culprit becomes the root cause of a job whose first
  failure only says who gave up (a timeout, a peer's transport error, the rank gloo aborted on a mismatch).
"""
from __future__ import annotations

import re

from ...grouping import rank_ranges
from ..evidence.model import RankFailure
from .reraised import named_by_the_library
from .dumps import Judged
from .verdict import Category, Findings
from .vote import odd_ones
from .classify import stopped_in_own_code, waited_call  # noqa: F401 - tests name them here
from .stopped import TELL_APART, stop_explains

# gloo: "Timed out waiting 15000ms for recv operation"; NCCL: "WorkNCCL(..., Timeout(ms)=600000)"; c10d: "timeout=...".
# The store's (init_process_group, a barrier on it): "DistStoreError: wait timeout after 30000ms".
TIMEOUT_MS = re.compile(r"Timed out waiting (\d+)\s*ms|Timeout\(ms\)=(\d+)|timed out after (\d+)\s*ms|"
                        r"wait timeout after (\d+)\s*ms", re.I)
ADOPTABLE = {"timeout", "nccl", "unknown", "peer_lost", "hang", "stopped", "desync", "consequence"}
DETECTOR = ("detected the mismatch: gloo aborts the rank that receives a message of another size, which need not "
            "be the rank whose call differs; the logs do not say whose does (the ranks' flight-recorder dumps do)")
NO_MAJORITY = "no majority between two ranks: "
ENDED_EARLY_FIX = ("every rank must issue the same collectives: a rank that returns or calls sys.exit early (a shorter "
                   "data loop, a rank-dependent `if`/`break`) leaves the others waiting in their next one; give every "
                   "rank the same number of steps (DistributedSampler with drop_last=True), or use "
                   "torch.distributed.algorithms.Join for uneven inputs")


def timeout_s(text: str) -> float | None:
    """The process-group timeout a timed-out collective reports, in seconds."""
    m = TIMEOUT_MS.search(text or "")
    if not m:
        return None
    return int(next(g for g in m.groups() if g)) / 1000.0


# Said of a rank stopped without a stack in its log; end_rules.stack_on_file corrects it where the bootstrap
# wrote the rank's stack at the launcher's SIGTERM (stacks/sigterm/rankR.txt).
NO_STACK = "its stack is not in the logs: it was stopped without one"


def hang_timeout_advice(pg_timeout: float | None) -> str:
    """How to get every rank's stack next time: run-trainer arms before the process group's timeout; a
    --hang-timeout, when given, below that timeout (a larger one could never fire first)."""
    base = ("a rank waited in a collective for a rank that never came: rerun under `ddpdoctor run-trainer` (it "
            "collects every rank's stack and flight recorder before your process group's timeout expires, and names the "
            "rank behind)")
    if pg_timeout is None:
        return base + "; raise the process-group timeout only if the work is legitimately slow"
    suggest = max(1, int(pg_timeout * 0.5))
    return (base + f", or fire sooner with run-trainer's option `ddpdoctor run-trainer --hang-timeout {suggest}` (below your {pg_timeout:g} s timeout); raise "
            "the process-group timeout only if the work is legitimately slow")


def refine_timeouts(fails: list[RankFailure]) -> None:
    for f in fails:
        if f.category == "timeout":
            f.fix = hang_timeout_advice(timeout_s("\n".join(x for x in (f.message or "", f.traceback, f.log_tail) if x)))


def judge(failures: list[RankFailure]) -> tuple[RankFailure | None, list[RankFailure]]:
    """Root cause: the earliest failure that is not a consequence; everything else is a consequence."""
    if not failures:
        return None, []
    real = [f for f in failures if not f.victim]
    # A collective timeout is a consequence when anything else went wrong first; a rank whose records hold no
    # cause (an exit code, nothing else) is never the root cause over one whose records hold its error.
    primary = [f for f in real if f.category != "timeout"] or real or failures
    primary = [f for f in primary if f.category != "unknown"] or primary
    root = min(primary, key=lambda f: (f.timestamp if f.timestamp is not None else float("inf"), f.rank or 0))
    root = named_by_the_library(root, failures)
    rest = []
    for f in failures:
        if f is root:
            continue
        if not f.reason:
            f.reason = "failed after the root cause"
        f.victim = True
        rest.append(f)
    return root, rest


def attribute(findings: Findings, stopped_by: str | None = None) -> None:
    """Each attempt's root cause and consequences from its records as read (``findings.records``), the last
    attempt's as the job's; once (decide() calls it, the collectors never do). ``stopped_by``: torchrun itself was
    stopped from outside, so a last attempt whose every failure the stop makes has no root cause of its own."""
    if findings.attributed:
        return
    findings.attributed = True
    for rec in findings.records:
        root, rest = blame_the_absent(*judge(list(rec.failures)), list(rec.silent), rec.host, listed=rec.listed,
                                      closing_signals=rec.closing_signals)
        if rec.last and stopped_by and root is not None and stop_explains([root, *rest]):
            root, rest = None, [root, *rest]  # consequences of the stop from outside, which decide then judges
        findings.attempts.append({"attempt": rec.attempt, "root_cause": root.to_json() if root else None,
                                  "consequences": [f.to_json() for f in rest]})
        if rec.last:
            findings.root_cause, findings.consequences = root, rest


def blame_the_absent(root: RankFailure | None, rest: list[RankFailure], silent: list[RankFailure],
                     host: str | None, listed: bool = True,
                     closing_signals: int = 0) -> tuple[RankFailure | None, list[RankFailure]]:
    """No flight-recorder dump: read who waited. Applies only when every rank that failed of its own timed
    out in a collective (anything else, an exception, a SIGKILL, is a cause in its own right). ``closing_signals``:
    how many ranks torchrun says it sent its closing signal (those leave no record either: not ranks that left).
    ``silent``: the attempt's ranks with no record, as the collector read its folders."""
    fails = ([root] if root else []) + rest
    if root is not None and root.category == "desync" and root.signal == "SIGABRT":
        root.reason, root.named = DETECTOR, False  # gloo aborts the rank that receives a message of another size
    # every failed rank lost a peer (or was stopped by the launcher after one did): who left?
    if fails and any(f.category == "peer_lost" for f in fails) and all(
            f.category == "peer_lost" or (f.category == "signal" and f.victim and f.signal in ("SIGTERM", "SIGINT"))
            for f in fails):
        departed = silent
        # torchrun stops the ranks still running after the first failure and lists none of them: as many
        # closing signals as silent ranks (a node lost, a network split) means they were stopped, not departed
        if departed and closing_signals < len(departed):
            return _blame_the_departed(fails, departed, listed)
    timed_out = [f for f in fails if f.category == "timeout"]
    if not timed_out or any(not f.victim and f.category != "timeout" for f in fails):
        return root, rest
    waited = {f.rank for f in timed_out}
    # Stopped by the launcher: SIGTERM/SIGINT, or a script's own handler exiting 128 + the signal without a word.
    # Or SIGKILLed by the launcher after it ignored the SIGTERM (postmortem.forced_kill: a stopped, frozen process).
    stopped = [f for f in fails if f.rank not in waited and ((f.category in ("signal", "unknown")
               and (f.signal in ("SIGTERM", "SIGINT") or (f.exit_code in (130, 143) and not f.message)
                    or (f.signal == "SIGKILL" and f.victim))) or stopped_in_own_code(f))]
    pg = next((t for t in (timeout_s("\n".join((f.message or "", f.traceback, f.log_tail))) for f in timed_out) if t), None)
    # Inside a collective when the job ended: the ranks that timed out, and those whose wait a peer's exit
    # broke (their traceback runs through the collective).
    inside = timed_out + [f for f in fails if f.category == "peer_lost" and f.rank not in waited
                          and waited_call(f)[0] != "a collective"]
    calls = {f.rank: waited_call(f) for f in inside}
    if stopped or silent:
        return _blame_the_quiet(fails, timed_out, stopped, silent, calls, pg)
    # Every failed rank timed out: the call a minority waited in is the odd one (a rank-guarded barrier).
    odd, major = odd_ones(calls)  # the judge's one vote
    if odd:
        return _blame_the_odd_call(fails, inside, calls, major)
    return _stuck_collective(fails, timed_out, calls, len(set(calls.values())) > 1, host, pg)


def _where(calls: dict) -> str:
    """Each rank's call as a sentence: "rank 0: all_reduce at train.py:12, rank 1: barrier"."""
    return ", ".join(f"rank {r}: {c[0]}" + (f" at {c[1]}" if c[1] else "") for r, c in sorted(calls.items(), key=_key))


def _blame_the_quiet(fails: list[RankFailure], timed_out: list[RankFailure], stopped: list[RankFailure],
                     silent: list[RankFailure], calls: dict, pg: float | None) -> tuple[RankFailure, list[RankFailure]]:
    """The ranks the launcher stopped without their ever timing out, or that left no error: likely culprits."""
    culprits = sorted(stopped, key=lambda f: f.rank if f.rank is not None else 1 << 30) + silent
    names = ", ".join(_name(f) for f in culprits)
    how = ("stopped by the launcher" if stopped else "left no error") + " without ever timing out"
    if any(f.signal == "SIGKILL" for f in stopped):
        how = ("stopped by the launcher without ever timing out (SIGKILLed after ignoring its SIGTERM: a stopped or "
               "frozen process)")
    first = culprits[0]
    # Several ranks equally quiet: the logs cannot say which of them the others waited for (one may only have
    # waited on another, as in a subgroup), so none is named; the message lists them.
    one = len(culprits) == 1
    new = RankFailure(
        rank=first.rank if one else None, local_rank=first.local_rank if one else None, host=first.host,
        exit_code=first.exit_code if one else None, signal=first.signal if one else None, attempt=first.attempt,
        category="hang", error_type="likely_missing_rank",
        message=(f"likely {names if one else 'one or more of ' + names}: {how}, so not inside the collective that "
                 f"{_ranks(timed_out)} timed out in ({_where(calls)}); no flight-recorder dump says "
                 + ("for certain" if one else "which of them the others waited for; no rank is named. "
                    + TELL_APART[0].upper() + TELL_APART[1:])),
        location=waited_call(first)[1] if one and stopped_in_own_code(first) else None,  # its handler's traceback
        fix=("look at what " + names + f" was doing ({NO_STACK}); "
             + hang_timeout_advice(pg)))
    out = [f for f in fails if f not in stopped]
    for f in out:
        f.victim, f.reason = True, (f"waited in {calls[f.rank][0]} for {names} and timed out" if f.rank in calls
                                    else f.reason or "failed after the root cause")
    for f in culprits[1:] if one else culprits:
        f.victim, f.reason, f.named = False, ("likely culprit too: " if one else "one of the quiet ranks: ") + how, one
    return new, (culprits[1:] if one else culprits) + out


def _blame_the_departed(fails: list[RankFailure], departed: list[RankFailure],
                        listed: bool) -> tuple[RankFailure, list[RankFailure]]:
    """Every rank that failed lost a peer inside a collective, and some ranks of the attempt left no failure record:
    torchrun lists only the ranks that failed (``listed``: its table was read), so those most likely ended of their
    own (exit code 0) early; without its table, a rank killed without a trace looks the same. Several such ranks
    without the table: torchrun's closing SIGTERM leaves the ranks it stopped as silent as the one that left or was
    killed, so none is named; the candidates are listed with what would tell them apart."""
    names = ", ".join(_name(f) for f in departed)
    calls = {f.rank: waited_call(f) for f in fails}
    first = departed[0]
    one = len(departed) == 1 or listed
    new = RankFailure(
        rank=first.rank if one else None, local_rank=first.local_rank if one else None, host=first.host,
        exit_code=None, attempt=first.attempt, category="hang",
        error_type="likely_ended_early" if one else "no_culprit_candidates",
        message=(f"likely {names if one else 'one of ' + names}: left no failure record while every rank that "
                 f"failed lost a peer inside a collective ({_where(calls)}); " + (
                     "torchrun lists only the ranks that failed, so it most likely ended of its own (exit code 0) "
                     "before the others were done" if listed else
                     "without torchrun's failure table (--agent-log), it ended early of its own or was killed "
                     "without a trace" if one else
                     "the log dir cannot tell them apart: one ended or was killed (SIGKILL, the OOM killer) without "
                     "a trace, and torchrun then stopped the others, which leaves no trace either; no rank is "
                     "named. " + TELL_APART[0].upper() + TELL_APART[1:])),
        fix=(ENDED_EARLY_FIX + "; its own last output is in its stdout.log and stderr.log in the log dir" if one else
             TELL_APART + "; " + ENDED_EARLY_FIX))
    for f in fails:
        f.victim, f.reason = True, f"its {calls[f.rank][0]} broke when {names} left"
    for f in departed[1:] if one else departed:
        f.victim = False
        if not one:
            f.named = False
        f.reason = "likely ended early too: left no failure record" if one else "a candidate: left no failure record"
    return new, (departed[1:] if one else departed) + fails


def _blame_the_odd_call(fails: list[RankFailure], inside: list[RankFailure], calls: dict,
                        major: tuple) -> tuple[RankFailure, list[RankFailure]]:
    """Every failed rank timed out and a minority waited in another call: that minority is the likely desync."""
    odd = sorted((f for f in inside if calls[f.rank] != major), key=lambda f: _key((f.rank, 0)))
    held = sum(1 for call in calls.values() if call == major)
    op, site = calls[odd[0].rank]
    new = RankFailure(
        rank=odd[0].rank, local_rank=odd[0].local_rank, host=odd[0].host, exit_code=odd[0].exit_code,
        signal=odd[0].signal, attempt=odd[0].attempt, category="hang", error_type="likely_desync", location=site,
        message=(f"likely {', '.join(_name(f) for f in odd)}: waited in {op} while {held} rank(s) waited in "
                 f"{major[0]}" + (f" at {major[1]}" if major[1] else "")
                 + " (each inside its own collective when the job ended: they waited for each other)"),
        fix="make every rank issue the same collectives in the same order (a rank-dependent branch such as "
            "`if rank == 0: dist.barrier()`)")
    names = ", ".join(_name(f) for f in odd)
    rest = [f for f in fails if f is not odd[0]]  # the culprit's own record is the root cause, not its consequence
    for f in rest:
        if f in odd:
            f.victim, f.reason, f.named = False, f"likely culprit too: waited in {calls[f.rank][0]}", True
        elif f.rank in calls:
            verb = "timed out" if f.category == "timeout" else "waited"
            f.victim, f.reason = True, f"{verb} in {calls[f.rank][0]} for {names}"
        else:
            f.victim = True
    return new, rest


def _stuck_collective(fails: list[RankFailure], timed_out: list[RankFailure], calls: dict, no_majority: bool,
                      host: str, pg: float | None) -> tuple[RankFailure, list[RankFailure]]:
    """Every rank timed out and no minority stands out: the collective itself, or a tie nobody can break."""
    new = RankFailure(
        rank=None, local_rank=None, host=host, exit_code=None, attempt=timed_out[0].attempt, category="hang",
        error_type="desync_no_majority" if no_majority else "stuck_collective",
        message=(f"every rank timed out inside a collective ({_where(calls)}): " + (
            f"no majority among {len(calls)} rank(s) says whose call is wrong" if no_majority else
            "none of them completed it (the communication, or a rank frozen inside it)")),
        fix=("make every rank issue the same collectives in the same order" if no_majority else
             "run `ddpdoctor preflight` and `ddpdoctor nccl-bench` across these hosts; " + hang_timeout_advice(pg)))
    for f in fails:
        f.victim = True
        f.reason = f"waited in {calls[f.rank][0]}" if f.rank in calls else f.reason
    return new, fails


def adopt(verdict: Findings, hang: Judged | None) -> None:
    """The dumps' verdict becomes the root cause when the job's first failure only says who gave up: a timeout,
    a peer's transport error, a SIGTERM from the launcher, a log-only "likely" guess, or the rank gloo aborted on
    a mismatch that the majority of the ranks' calls pins on another rank. A real error (an exception, a
    SIGKILL) stays the root cause. The culprit is never listed as its own consequence. Decided on the typed
    verdict (category, culprits, likely, the tie); its words only go into the messages."""
    root = verdict.root_cause
    if hang is None or hang.category in (Category.UNKNOWN, Category.OUTSIDE_COLLECTIVES) or root is None:
        return  # no rank failed: a live snapshot's skew (one rank a collective ahead) is no failure
    v = hang.verdict
    culprits = v.culprit_ranks
    if not (root.victim or root.category in ADOPTABLE):
        return
    if _aborted_rank_only_reworded(root, hang):
        return
    first = v.culprits[0]
    place = hang.place(first)
    new = RankFailure(rank=first.rank, local_rank=None, host=place.get("host"), exit_code=None,
                      category="hang", error_type=hang.legacy_class,
                      message=("likely: " if v.likely else "") + hang.summary(),
                      location=(hang.call_site(first.rank) if v.category == Category.DESYNC else None)
                      or place.get("where"), fix=hang.fix())
    if place.get("last_seen") and place.get("last_seen_where"):  # its last collective, not where it stands
        new.message += (f" (rank {first.rank} last seen in {place['last_seen']}, called at "
                        f"{place['last_seen_where']}; where it stood after it, no stack says)")
    if first.ended and hang.legacy_class == "missing_rank":
        ended_early(new, first.ended)
    old = [root] + list(verdict.consequences)
    consequences = []
    for f in old:
        if f.rank is None and f.category == "hang":  # the logs' own guess (no rank named): the dumps replace it
            continue
        if f.rank == new.rank:  # the culprit's own record: its ending, not a consequence of itself
            new.exit_code, new.signal, new.local_rank = f.exit_code, f.signal, f.local_rank
            new.host = new.host or f.host
            new.location = new.location or f.location
            # A real record, not a log-only guess nor a peer's transport error (the culprit lost its peers when
            # the rank gloo aborted ended: "Connection reset by peer" says nothing about its own call).
            if (f.error_type or f.message) and f.category not in ("hang", "peer_lost"):
                new.message += f" (its own record: {f.error_type + ': ' if f.error_type else ''}{f.message or f.reason})"
            continue
        if f.rank in culprits:
            f.victim, f.reason, f.named = False, f"culprit too ({hang.legacy_class}): see the root cause", True
        else:
            f.victim = True
            if f is root or f.category in ("timeout", "desync", "peer_lost"):
                f.reason = _why_waited(f, hang, culprits)
        consequences.append(f)
    verdict.root_cause, verdict.consequences = new, consequences


def _aborted_rank_only_reworded(root: RankFailure, hang: Judged) -> bool:
    """No culprit to adopt: a tie, or the rank gloo aborted is itself the likely odd call. Its reason says so;
    True when nothing more is to be done."""
    v, culprits = hang.verdict, hang.verdict.culprit_ranks
    if not culprits:
        if v.no_majority and root.category == "desync":
            root.reason = (f"{hang.summary()}; rank {root.rank} is the one gloo aborted, which says only that it "
                           "received a message of another size")
        return True
    if root.named is False and root.category == "desync" and v.likely and culprits == [root.rank]:
        # The rank gloo aborted left no flight record: with two or more records agreeing, its call is the odd one.
        if len(hang.files) >= 2:
            root.reason = ("likely the odd call too: every rank that left a flight record agrees on the collective; "
                           "this rank, which gloo aborted, left none")
            root.named = None
        else:
            root.reason = (NO_MAJORITY + f"rank {root.rank}, which gloo aborted on a message of another size, and the "
                           "one other rank called differently; either call may be the wrong one")
        return True
    return False


def ended_early(f: RankFailure, ended: dict) -> None:
    """The culprit's script ended of its own (its last line or sys.exit) while the others went on into a
    collective: not a stall to look for in its stack, a rank that left early."""
    where = ended.get("where")
    f.error_type, f.exit_code, f.category = "ended_early", ended["exit_code"], "hang"
    f.message = (f"rank {f.rank} ended of its own (exit code {ended['exit_code']}"
                 + (f", sys.exit at {where}" if where else "") + ") while the others went on: " + f.message)
    f.location = where or f.location
    code = ended["exit_code"]
    # exit 0: the uneven-steps mistake; any other code: the script chose to stop on an error of its own
    f.fix = ENDED_EARLY_FIX if code == 0 else (
        f"its script exited with code {code} on purpose (sys.exit): its stderr.log says why; raise instead, so "
        "torchrun stops every rank and records the error")


def _why_waited(f: RankFailure, hang: Judged, culprits: list) -> str:
    names = rank_ranges(culprits)
    if f.category == "desync":
        return (f"gloo aborted it on a message of another size from rank(s) {names}, whose call differs from the "
                "majority's: it detected the mismatch, it did not cause it")
    op, seq = hang.op_of(f.rank) if f.rank is not None else None, hang.seq()
    head = f"waited in {op} #{seq}" if seq is not None and op else "waited"
    return f"{head} for rank(s) {names} ({hang.legacy_class})"


def culprit_ranks(root: dict | None, consequences: list[dict]) -> list[int]:
    """Every rank the verdict blames: the root cause's and the consequences marked culprits too."""
    named = root and root.get("rank") is not None and root.get("named") is not False
    out = [root["rank"]] if named else []
    out += [c["rank"] for c in consequences if c.get("rank") is not None and not c.get("victim")
            and c.get("named") is True]
    return sorted(set(out))


def _name(f: RankFailure) -> str:
    return f"rank {f.rank}" if f.rank is not None else f"local rank {f.local_rank} on {f.host}"


def _ranks(fails: list[RankFailure]) -> str:
    return "rank(s) " + ", ".join(str(f.rank) for f in sorted(fails, key=lambda f: _key((f.rank, 0))))


def _key(item) -> int:
    return item[0] if item[0] is not None else 1 << 30
