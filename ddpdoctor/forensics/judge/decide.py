"""The one decision every collector ends with: ``decide(evidence, failures, context) -> Outcome``, the only place
that combines what the collectors gathered. The live watchdog and attach bring a judged wait-for graph; run-trainer's
end and postmortem bring a finished job's failures as its logs hold them, its flight records judged, the kept call
sizes, the stop from outside and the watchdog's report. Here, in one order: attribution (the dumps' culprit over a
rank that only gave up), the sizes, the stop from outside, the unverified end, the watchdog's hang and a stop on
request; then the typed Outcome each document carries as ``outcome`` (STATE_TABLE gives the verdict word and the
exit code), with the records behind it for the documents' older keys."""
from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace

from ..evidence.model import RankFailure
from . import attribution, end_rules, nccl_timeout, sizes
from .dumps import Judged
from .sizes import SizeMismatch
from .outcome import Category, Outcome, Place, Record, State, Threshold
from .policy import STALLED_S, ThresholdSource
from .stopped import STOPPED_FIX, STOPPED_FIX_TRAINER, not_verified, stopped_from_outside
from .verdict import Findings

# attach's motion categories (attach/decide.py) as states: not a verdict on a hang
MOTION = {"progressing": (State.PROGRESSING, Category.PROGRESSING),
          "no_job": (State.PROGRESSING, Category.NO_JOB)}
# every reading that is no verdict on a hang: the job moves, no job, or nothing tells yet (no_movement)
MOTION_CATEGORIES = (*MOTION, "no_movement")
# a root cause that stands for the hang the judge described (the watchdog's, a stop while hung)
HANG_ROOTS = {"hang"}
# the evidence tag of an outcome whose root cause is attach's verdict saved while the job hung
ATTACH_SAVED = "attach_saved_verdict"
# The prefix of the error types a rule gives a rank the records name only as the likely one (attribution's
# likely_missing_rank, nccl_timeout's likely_nccl_timeout_behind): a culprit in the Outcome, not named
LIKELY = "likely_"
# A rank that failed of its own as the job stalled (an exception, a C++ abort on a collective mismatch) stays the
# cause over the watchdog's hang; not so a signal (the watchdog's own SIGKILL after the grace) or a timeout.
NOT_ITS_OWN = ("unknown", "signal", "timeout", "hang")


@dataclass(frozen=True)
class Evidence:
    """What a collector gathered beside the ranks' failures. Live and attach: ``verdict``, the wait-for graph
    judged from live stacks and records (words.to_json). A finished job: its flight records judged (``dumps``),
    the kept call sizes' first mismatch, how long a collective stood pending in the dumps and the timeouts they
    ran under, the signal torchrun's output says it received, the watchdog's report when it stopped the job, the
    ranks the logs hold, the ranks whose stack the bootstrap wrote at the launcher's SIGTERM, torchrun's own
    exit (code, output, log dir) when the collector ran it, and attach's verdict saved while the job hung."""
    verdict: dict | None = None
    dumps: Judged | None = None
    sizes: SizeMismatch | None = None
    stalled_s: float | None = None
    timeouts: tuple[float, ...] = ()
    stop_signal: str | None = None
    watchdog: dict | None = None
    ranks: tuple[int, ...] = ()
    stacks: frozenset[int] = frozenset()
    agent: tuple[int, str, str] | None = None  # torchrun's exit code, its output, the log dir
    attached: object | None = None  # attach's verdict saved while the job hung (postmortem/known.AttachVerdict)


@dataclass(frozen=True)
class Failures:
    """The ranks' failures. ``findings``: as the logs hold them (postmortem.analysis), to be attributed here;
    or already attributed (``root``, ``consequences``, ``culprit_ranks``), as the live watchdog names them."""
    root: RankFailure | None = None
    consequences: tuple[RankFailure, ...] = ()
    culprit_ranks: tuple[int, ...] = ()
    findings: Findings | None = None

    @classmethod
    def of(cls, root: dict | None, consequences: list[dict] | None, culprit_ranks: list[int] | None) -> "Failures":
        return cls(RankFailure(**root) if root else None,
                   tuple(RankFailure(**c) for c in consequences or ()), tuple(culprit_ranks or ()))


@dataclass(frozen=True)
class Context:
    """What the collector knows of how the job stands or ended, beside the evidence and the failures."""
    entry: str                              # live, run-trainer, postmortem, attach
    failed: bool | None = None              # the launcher's own end says it (run-trainer); None: from the evidence
    normal_end: bool = False                # evidence of a normal end (torchrun's word, every rank's exit record)
    interrupted: int | None = None          # the signal run-trainer itself received
    motion: str | None = None               # attach: its reading's category (progressing, no_movement)
    busy: tuple[int, ...] = ()              # attach: ranks working in their own code while others wait
    threshold: dict | None = None           # the limit that made silence a hang (run.json's hang.threshold)
    hung: bool = False                      # the watchdog judged the job hung (live), whatever the judge could name
    logs: bool = True                       # the job's logs were read (postmortem --fr-dir alone: only its dumps)
    tags: tuple[str, ...] = field(default_factory=tuple)


def decide(evidence: Evidence, failures: Failures, context: Context) -> Outcome:
    """The Outcome of what a collector gathered: a finished job's failures are combined with the evidence first
    (``_finished``), then the state, the category, the culprits with where they stand, and the consequences."""
    if failures.findings is not None:
        return _finished(evidence, failures.findings, context)
    return _shape(evidence.verdict, failures, context, bool(context.failed))


def _finished(evidence: Evidence, findings: Findings, context: Context) -> Outcome:
    """A finished (or stopped) job: the rules, in their one order, on the failures its logs hold."""
    attribution.attribute(findings, findings.stopped_by)  # each attempt's root cause from its records as read
    _nccl_timed_out(findings)
    attach_named = False  # attach's saved verdict named the root cause
    if evidence.watchdog is not None:
        root, consequences = _watchdog_hang(evidence.watchdog, findings)
    elif context.interrupted:
        root, consequences = _stopped_on_request(evidence, findings, context.interrupted)
    else:
        attach_named = _attributed(evidence, findings, context)
        if attach_named:  # said in the evidence tags: the verdict is attach's, from while the job hung
            context = replace(context, tags=context.tags + (ATTACH_SAVED,))
        root = findings.root_cause.to_json() if findings.root_cause else None
        consequences = [f.to_json() for f in findings.consequences]
    unverified = context.failed is None and root is not None and root.get("error_type") == "not_verified"
    failed = context.failed if context.failed is not None else root is not None and not unverified
    if failed and root is None and evidence.agent is not None:
        root = end_rules.agent_failure(*evidence.agent)
    end_rules.stack_on_file(root, evidence.stacks)
    consequences = consequences if root else []
    culprits = _culprit_ranks(evidence.watchdog, root, consequences) if failed else []
    verdict = (evidence.watchdog or {}).get("verdict") if evidence.watchdog is not None else \
        evidence.attached.diagnosis if attach_named and failed else \
        evidence.dumps.to_json() if evidence.dumps is not None and failed else None
    said = failed or unverified  # an unverified end says what is known in its root cause too
    record = Record(root if said else None, tuple(consequences) if said else (), tuple(culprits))
    kept = Failures.of(root, consequences, culprits) if failed else Failures()
    normal = context.normal_end if context.failed is not None else not unverified
    return _shape(verdict, kept, Context(context.entry, failed, normal, context.interrupted,
                                         threshold=context.threshold, tags=context.tags), failed, record)


def _nccl_timed_out(findings: Findings) -> None:
    """The ranks aborted on NCCL's own timeout: its watchdog's lines say who is behind (judge/nccl_timeout.py),
    first: a later stop (srun ending the step, a time limit) does not make it a stop from outside."""
    if findings.attempts and nccl_timeout.adopt(findings):
        findings.attempts[-1].update(root_cause=findings.root_cause.to_json(),
                                     consequences=[f.to_json() for f in findings.consequences])


def _attributed(evidence: Evidence, findings: Findings, context: Context) -> bool:
    """The dumps' culprit over a rank that only gave up, the kept sizes over the rank gloo aborted, a stop from
    outside (hung or not), attach's saved word where the logs name no rank, the dumps' verdict where they are
    all there is (no logs), and no pass without evidence of a normal end (the launcher's exit unknown). True when attach's saved verdict named the root cause."""
    attribution.adopt(findings, evidence.dumps)
    sizes.adopt(findings, evidence.sizes)
    fix = STOPPED_FIX_TRAINER if context.entry == "run-trainer" else STOPPED_FIX
    stopped_from_outside(findings, evidence.dumps, evidence.stalled_s, evidence.stop_signal, fix=fix,
                         timeouts=list(evidence.timeouts))
    adopted = _attach_said(findings, evidence.attached, evidence.stop_signal)
    if not context.logs:
        end_rules.dumps_alone(findings, evidence.dumps, list(evidence.ranks))
    if context.failed is None:
        not_verified(findings, context.normal_end, list(evidence.ranks))
    return adopted


def _attach_said(findings: Findings, attached, stop_signal: str | None) -> bool:
    """Where the logs name no rank (nothing failed, a stop from outside with none named, several silent ranks they
    cannot tell apart), the rank attach named while the job hung becomes the root cause, said as attach's, with
    what the logs alone said."""
    root = findings.root_cause
    if attached is None or (root is not None and root.rank is not None):
        return False
    findings.root_cause = attached.root_cause(stop_signal)
    if root is not None and root.error_type not in ("stopped_from_outside", "stopped_while_hung"):
        findings.root_cause.message += f"; the logs alone: {root.message}"  # the stop is said already
    return True


def _watchdog_hang(report: dict, findings: Findings) -> tuple[dict | None, list[dict]]:
    """run-trainer's watchdog stopped the job hung: its hang is the root cause, unless a rank failed of its own
    as the job stalled; the first failure the logs hold then becomes a consequence the watchdog's stop made."""
    root = findings.root_cause.to_json() if findings.root_cause else None
    consequences = [f.to_json() for f in findings.consequences]
    if root and not root["victim"] and root["category"] not in NOT_ITS_OWN:
        return root, consequences
    if root:
        consequences.insert(0, dict(root, victim=True, reason="stopped by the hang watchdog"))
    return end_rules.hang_root_cause(report), end_rules.hang_consequences(report) or consequences


def _stopped_on_request(evidence: Evidence, findings: Findings, signum: int) -> tuple[dict | None, list[dict]]:
    """run-trainer was stopped (Ctrl-C, a scheduler's SIGTERM to the step) before its watchdog judged: a real
    failure said before the signal stays the root cause; else the hang the flight records written at the
    SIGTERM show (a collective pending STALLED_S or more), else the stop itself."""
    root = findings.root_cause.to_json() if findings.root_cause else None
    consequences = [f.to_json() for f in findings.consequences]
    if end_rules.said_before(root):
        return root, consequences
    if root:
        consequences.insert(0, dict(root, victim=True, reason="stopped after run-trainer was interrupted"))
    return _hung_at_stop(evidence, signum) or end_rules.interrupted_root(signum), consequences


def _hung_at_stop(evidence: Evidence, signum: int) -> dict | None:
    if evidence.stalled_s is None or evidence.stalled_s < STALLED_S:
        return None
    hung = Findings(root_cause=None)
    stopped_from_outside(hung, evidence.dumps, evidence.stalled_s, signal.Signals(signum).name,
                         fix=STOPPED_FIX_TRAINER)
    return hung.root_cause.to_json() if hung.root_cause else None


def _culprit_ranks(watchdog: dict | None, root: dict | None, consequences: list[dict]) -> list[int]:
    """The watchdog's culprits when its hang is the root cause; else every rank the records blame."""
    if watchdog and root and root.get("category") == "hang":
        named = [c["rank"] for c in (watchdog.get("verdict") or {}).get("culprits", [])]
        if named:
            return named
    return attribution.culprit_ranks(root, consequences)


def _shape(verdict: dict | None, failures: Failures, context: Context, failed: bool,
           record: Record | None = None) -> Outcome:
    """The state, the category, the culprits with where they stand, the consequences."""
    tags = tuple((verdict or {}).get("evidence") or ()) + context.tags
    common = dict(entry=context.entry, evidence=tags, threshold=_threshold(context.threshold), record=record)
    if context.motion in MOTION:
        state, category = MOTION[context.motion]
        return Outcome(state, category, **common)
    if context.motion == "no_movement":
        category = Category.WAITING_ON_BUSY if context.busy and (verdict or {}).get("waiting") else \
            Category.COMPUTING if context.busy else Category.NO_MOVEMENT
        return Outcome(State.UNDECIDED, category, **common)
    root = failures.root
    if context.interrupted and (root is None or root.category == "interrupted"):
        return Outcome(State.INTERRUPTED, Category.INTERRUPTED, consequences=_consequences(failures), **common)
    if not failed:
        state = State.PASS if context.normal_end else State.UNVERIFIED
        return Outcome(state, Category.NORMAL_END if context.normal_end else Category.UNKNOWN, **common)
    hang = (verdict is not None or context.hung) and (root is None or root.category in HANG_ROOTS)
    category = Category.of((verdict or {}).get("category")) if hang else Category.of(root.category if root else None)
    ranks = failures.culprit_ranks or tuple(c["rank"] for c in (verdict or {}).get("culprits") or ()) or \
        ((root.rank,) if _likely(root) and root.rank is not None else ())
    places = _places(verdict, root)
    culprits = tuple(places(rank) for rank in ranks)
    return Outcome(State.HANG if hang else State.FAIL, category, culprits, _consequences(failures), **common)


def _places(verdict: dict | None, root: RankFailure | None):
    """Where each culprit stands: the judge's word (its stack), else its own record (a traceback's file:line).
    Indexed once: a world of 65,536 ranks is one pass, not one per rank."""
    verdict = verdict or {}
    named = set(verdict.get("named") or ())
    certain = not verdict.get("likely_culprits")
    judged = {c.get("rank"): c for c in reversed(verdict.get("culprits") or ())}  # the first word on a rank

    def place(rank: int) -> Place:
        c = judged.get(rank)
        if c is not None:
            return Place(rank, c.get("host"), c.get("node"), c.get("where") or c.get("last_seen_where"),
                         c.get("function"), named=rank in named or certain, why=str(c.get("why") or ""))
        if root is not None and root.rank == rank:
            return Place(rank, root.host, None, root.location, None,
                         named=root.named is not False and not _likely(root), why=root.category)
        return Place(rank)

    return place


def _likely(root: RankFailure | None) -> bool:
    """The records name this root cause's rank only as the likely one."""
    return root is not None and (root.error_type or "").startswith(LIKELY)


def _consequences(failures: Failures) -> tuple[Place, ...]:
    return tuple(Place(f.rank, f.host, None, f.location, None, named=False, why=f.reason or f.category)
                 for f in failures.consequences)


def _threshold(threshold: dict | None) -> Threshold | None:
    if not threshold or threshold.get("seconds") is None:
        return None
    try:
        source = ThresholdSource(threshold.get("source"))
    except ValueError:
        return None
    return Threshold(float(threshold["seconds"]), source, str(threshold.get("why") or ""))
