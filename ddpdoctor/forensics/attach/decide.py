"""attach's decision: the job's motion over the rounds by the one policy (judge.policy: computing, waiting on a
busy rank, moved, or some rank waiting while nothing moves), then the one judge (forensics/judge, the wait-for graph
run-trainer and postmortem use) over the ranks' py-spy records where it hangs. Worded by forensics/judge/words
like run.json's hang.verdict."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from enum import Enum

from ...grouping import rank_ranges
from ...human import human_bytes
from ..evidence import lagging
from ..evidence.model import JobEvidence, RankState, WaitKind
from ..judge import judge, policy, words
from .sample import RankRead, is_wait


class Motion(str, Enum):
    MOVED = "moved"            # the job progresses
    STILL = "still"            # some rank waits and nothing moved: judge the hang now
    UNDECIDED = "undecided"    # not a hang (a rank the others wait for works, or none waits): watch, then say so
    ONE_SAMPLE = "one_sample"  # --interval 0: movement not measured


@dataclass
class Reading:
    motion: Motion
    why: str
    busy: list[int]


def busy(r: RankRead) -> bool:
    return r.cpu is not None and r.cpu >= policy.BUSY_SHARE


def _waiting(r: RankRead) -> bool:
    """It stands in a wait: its flight record or its stack says so (policy.waits: a library's wait the frames do
    not prove is one only while the rank uses no CPU)."""
    if r.recorded is not None and is_wait(r.recorded):
        return True
    return r.waits and policy.waits(r.state.wait, busy(r))


def activity(r: RankRead) -> policy.Activity:
    """What one rank did over attach's rounds, in the policy's terms: its CPU share and whether its stack moved
    between the rounds stand for the two samples."""
    if not r.readable:
        return policy.Activity.UNKNOWN
    if _waiting(r):
        return policy.Activity.WAITING
    if busy(r) and policy.start_up_work(r.state.frames):
        return policy.Activity.STARTING
    if busy(r) or r.moved or policy.io_rate_works(r.io):
        return policy.Activity.WORKING
    return policy.Activity.IDLE


def motion(reads: list[RankRead]) -> Reading:
    """Whether the job moved between the rounds, by the one policy (judge.policy). Never "moved" when no rank
    moved. A rank that works in its own code while the others wait is busy, not stuck: ``UNDECIDED`` (waiting on a
    busy rank); a job where no rank waits computes: never a hang (``UNDECIDED`` when none moves either); some
    rank waits and none moves: ``STILL``. Every rank inside its wait and spinning there (a large collective) is
    watched, unless a flight record shows the wait far longer than any step before it (``overdue_wait``)."""
    readable = [r for r in reads if r.readable]
    if readable and all(r.moved is None for r in readable):
        return Reading(Motion.ONE_SAMPLE, "one sample: movement not measured", [])
    progressed = any(r.progressed for r in reads)
    reading = policy.job_motion({r.rank: activity(r) for r in reads}, progressed)
    computing = list(reading.busy)
    if reading.motion is policy.JobMotion.MOVED:
        if progressed:
            moved = sorted(r.rank for r in reads if r.progressed)
            return Reading(Motion.MOVED, f"rank(s) {rank_ranges(moved)} moved between the samples", [])
        return Reading(Motion.MOVED, f"rank(s) {rank_ranges(reading.starting)} do start-up work (an import, a "
                                     "compile, a build) and use the CPU", [])
    if reading.motion is policy.JobMotion.COMPUTING:  # never a hang; "moved" only where a stack moved
        moved = sorted(r.rank for r in readable if r.moved)
        if moved:
            return Reading(Motion.MOVED, f"no rank waits on another; rank(s) {rank_ranges(moved)} moved", [])
        what = f"rank(s) {rank_ranges(computing)} use the CPU" if computing else "none uses the CPU"
        return Reading(Motion.UNDECIDED, f"no rank moved and none waits on another ({what})", computing)
    if reading.motion is policy.JobMotion.WAITING_ON_BUSY:
        return Reading(Motion.UNDECIDED, f"no rank moved through a wait, and {_working(reads, computing)} in "
                                         "their own code: the others wait on a busy rank (a long step, or a hang)",
                       computing)
    overdue = overdue_wait(reads)
    if overdue is not None:
        return Reading(Motion.STILL, overdue, [])
    spinning = sorted(r.rank for r in readable if busy(r))
    if readable and len(spinning) == len(readable):  # every rank inside its wait and working in it
        return Reading(Motion.UNDECIDED, "no rank moved; every rank waits and uses the CPU", spinning)
    return Reading(Motion.STILL, "no rank moved, and none uses the CPU", [])


def _working(reads: list[RankRead], ranks: list[int]) -> str:
    """How the busy ranks work: using the CPU, reading or writing, or their stack moving between the rounds."""
    cpu = [r.rank for r in reads if r.rank in ranks and busy(r)]
    io = [r.rank for r in reads if r.rank in ranks and r.rank not in cpu and policy.io_rate_works(r.io)]
    stack = [r for r in ranks if r not in cpu and r not in io]
    parts = ([f"rank(s) {rank_ranges(cpu)} use the CPU"] if cpu else []) + \
        ([f"rank(s) {rank_ranges(io)} read or write"] if io else []) + \
        ([f"rank(s) {rank_ranges(stack)} move"] if stack else [])
    return " and ".join(parts)


def overdue_wait(reads: list[RankRead], now: float | None = None) -> str | None:
    """Why a waiting rank's collective is overdue by its own flight record's step times, or None: its pending
    collective was created more than policy.OVERDUE_FACTOR times the longest gap between the collectives it
    recorded before (at least policy.OVERDUE_MIN_GAPS of them), and more than policy.OVERDUE_FLOOR_S, ago. Times
    are the record's (wall clock, time_created_ns)."""
    now = time.time() if now is None else now
    for r in reads:
        rec = r.recorded
        if rec is None or rec.wait is None or rec.wait.call is None or rec.wait.call.created_ns is None:
            continue
        times = sorted(c.created_ns for c in rec.calls if c.created_ns and c.created_ns < rec.wait.call.created_ns)
        gaps = [(b - a) / 1e9 for a, b in zip(times, times[1:] + [rec.wait.call.created_ns])]
        if len(gaps) < policy.OVERDUE_MIN_GAPS:
            continue
        waited = now - rec.wait.call.created_ns / 1e9
        limit = max(policy.OVERDUE_FLOOR_S, policy.OVERDUE_FACTOR * max(gaps))
        if waited > limit:
            return (f"rank {r.rank} has waited {waited:.0f} s in {rec.wait.call.op}, over "
                    f"{policy.OVERDUE_FACTOR:g} times the longest step its flight record shows ({max(gaps):.1f} s)")
    return None


def undecided(reads: list[RankRead]) -> str | None:
    """Why the rounds cannot tell yet (a watch goes on), or None."""
    reading = motion(reads)
    return reading.why if reading.motion is Motion.UNDECIDED else None


def undecided_here(reads: list[RankRead]) -> str | None:
    """A node of several, on its own ranks: watch on while one of them computes in its own code and none went
    through a wait (the master decides on every node's ranks; a node of waiters alone stops after the interval)."""
    if any(r.progressed for r in reads):
        return None
    computing = sorted(r.rank for r in reads if activity(r) is policy.Activity.WORKING)
    return f"rank(s) {rank_ranges(computing)} work in their own code" if computing else None


# Not a verdict on the job: it moved ("pass"), or nothing moved and the rounds could not tell a long step from a
# hang ("warn": said as it is, exit 0, no rank blamed); every other category is the judge's hang or desync.


def evidence_of(reads: list[RankRead], world_size: int | None) -> JobEvidence:
    """The ranks read, as the model's live evidence; the world is every rank of the job (a rank of another node,
    or one that could not be read, has no record: the judge says it was not read rather than guess)."""
    world = tuple(range(world_size)) if world_size else ()
    read = {r.rank for r in reads if r.readable}
    evidence = JobEvidence(live=True, world=world, unread=tuple(r for r in world if r not in read))
    for r in reads:
        if r.recorded is not None:
            evidence.add(r.recorded)  # the flight record places it in collectives; py-spy's stack completes it
        if r.state is not None:
            evidence.add(r.state if r.recorded is not None else stack_call(r.state))
    return lagging.settle(evidence)  # a live record gloo has not caught up on is not a wait


# The judge places ranks inside a collective by its group's sequence ids, which only a flight recorder gives.
# Stacks read at one moment show every rank that is inside a blocking collective at the same point of the job:
# each is taken as inside the group's newest collective (sequence id 0 of the sample, not completed), so the
# ranks not in it are the ones behind. Stacks name no group across ranks (py-spy shows a per-process object), so
# only a collective the stack shows on the default group is placed so: the caller passed no group (py-spy's
# ``default_group``). One on a subgroup (a DeviceMesh dimension, FSDP's, a library's wait with no group on the
# stack) is left unplaced: a rank outside it is not missing from it (the 2-D mesh of issue 37: ranks 0 and 2,
# in the other dimension's collective, were named for "never entering" reduce_scatter); the judge then has it
# wait for the ranks that wait in nothing, and names none where every rank waits.
STACK_SEQ = 0


def stack_call(state: RankState) -> RankState:
    """``state`` with its stack's collective as the call it is inside, where no record gave one and the stack
    shows it on the default group (adapter field: the judge reads ``calls``)."""
    wait = state.wait
    if wait is None or wait.kind is not WaitKind.COLLECTIVE or wait.call is None or state.calls \
            or state.raw.get("default_group") is not True:
        return state
    call = replace(wait.call, seq=STACK_SEQ, completed=False, seq_from_stack=True)
    return replace(state, calls=(call,), wait=replace(wait, call=call), recorded=True,
                   raw={**state.raw, "seq_from": "stack"})


def decide(reads: list[RankRead], world_size: int | None, watched_s: float | None = None) -> dict:
    """The diagnosis document: {"category": "progressing", ...} when the job moved; {"category": "no_movement",
    ...} when nothing moved in ``watched_s`` seconds but a rank computes (or none waits on another): a long step
    cannot be told from a hang; else the judge's hang.verdict."""
    reading = motion(reads)
    if reading.motion is Motion.MOVED:
        return {"category": "progressing", "summary": f"the job progresses: {reading.why}",
                "fix": "nothing to do now; run attach again if it stops moving", "culprits": [],
                "consequences": [], "named": [], "likely_culprits": [], "movement": reading.why}
    evidence = evidence_of(reads, world_size)
    if reading.motion is Motion.ONE_SAMPLE and not any(_waiting(r) for r in reads):
        return _no_movement(reads, evidence, reading, None)
    if reading.motion is Motion.UNDECIDED:
        return _no_movement(reads, evidence, reading, watched_s)
    return dict(words.to_json(judge(evidence), evidence), movement=reading.why)


def _no_movement(reads: list[RankRead], evidence: JobEvidence, reading: Reading, watched_s: float | None) -> dict:
    """Nothing moved, and the rounds cannot tell a long step from a hang: said as it is, no rank blamed."""
    waiting = sorted(r.rank for r in reads if _waiting(r))
    verdict = words.to_json(judge(evidence), evidence) if waiting else {}
    # "no rank moved" only where none did: a rank computing in a loop moves in its own code (its row says so)
    who = "no waiting rank" if waiting and any(r.moved for r in reads) else "no rank"
    parts = [f"{who} moved in {watched_s:.0f} s" if watched_s is not None
             else "one sample: whether the ranks move was not measured"]
    if waiting:
        coll = (verdict.get("collective") or {}).get("library") or (verdict.get("collective") or {}).get("op")
        behind = sorted(set(verdict.get("named") or []) | set(verdict.get("likely_culprits") or []))
        parts.append(f"rank(s) {rank_ranges(waiting)} wait" + (f" in {coll}" if coll else "")
                     + (f" for rank(s) {rank_ranges(behind)}" if behind and len(behind) < len(reads) else ""))
    else:
        parts.append("no rank waits on another")
    computing = [_stands(r) for r in reads if r.rank in reading.busy]
    if computing:
        parts.append("; ".join(computing) + ": a long step, or a hang")
    elif watched_s is not None:
        parts.append("none uses the CPU (each stands in its own code: see the stacks)")
    fix = ("if a step takes longer than that, run again with a longer --wait (e.g. --wait 300); if it never "
           "moves, the stacks below show where each rank stands" if watched_s is not None
           else "run again with --interval above 0 to see whether the ranks move")
    return {"category": "no_movement", "summary": "; ".join(parts), "fix": fix, "culprits": [], "consequences": [],
            "named": [], "likely_culprits": [], "busy": reading.busy, "waiting": waiting,
            "waits": verdict.get("waits", {}), "collective": verdict.get("collective"), "movement": reading.why}


def _stands(r: RankRead) -> str:
    d = r.to_json()
    io = policy.io_rate_works(r.io)
    verb = ("uses the CPU inside its wait" if _waiting(r) else "reads or writes" if io and not busy(r)
            else "computes")
    where = f" at {d['where']}" + (f" in {d['function']}" if d.get("function") else "") if d.get("where") else ""
    figures = ([f"{r.cpu * 100:.0f} % of a core"] if r.cpu is not None else []) + \
        ([f"{human_bytes(int(r.io))}/s read and written"] if io else [])
    return f"rank {r.rank} {verb}{where}" + (f" ({', '.join(figures)})" if figures else "")


def outcome_of(diagnosis: dict):
    """The one Outcome (judge.decide) of what attach read: its motion, else the judge's hang verdict. Its state
    gives attach's verdict word and exit code (judge/outcome.STATE_TABLE)."""
    from ..judge.decide import MOTION_CATEGORIES, Context, Evidence, Failures, decide as decide_outcome

    category = str(diagnosis.get("category"))
    motion = category if category in MOTION_CATEGORIES else None
    context = Context("attach", failed=motion is None, motion=motion, busy=tuple(diagnosis.get("busy") or ()))
    return decide_outcome(Evidence(verdict=diagnosis), Failures(), context)
