"""attach's decision: progressing (a waiting rank moved between the samples, or no rank waits on another), else
the one judge (launch/judge, the wait-for graph run-trainer and postmortem use) over the ranks' py-spy records;
its verdict worded by launch/judge/words like run.json's hang.verdict."""
from __future__ import annotations

from dataclasses import replace

from ..evidence.model import JobEvidence, RankState, WaitKind
from ..judge import judge, words
from .sample import RankRead


def evidence_of(reads: list[RankRead], world_size: int | None) -> JobEvidence:
    """The ranks read, as the model's live evidence; the world is every rank of the job (a rank of another node,
    or one that could not be read, has no record: the judge says so rather than guess)."""
    evidence = JobEvidence(live=True, world=tuple(range(world_size)) if world_size else ())
    for r in reads:
        if r.recorded is not None:
            evidence.add(r.recorded)  # the flight record places it in collectives; py-spy's stack completes it
        if r.state is not None:
            evidence.add(r.state if r.recorded is not None else stack_call(r.state))
    return evidence


# The judge places ranks inside a collective by its group's sequence ids, which only a flight recorder gives.
# Stacks read at one moment show every rank that is inside a blocking collective at the same point of the job:
# each is taken as inside the group's newest collective (sequence id 0 of the sample, not completed), so the
# ranks not in it are the ones behind. Stacks name no group across ranks (py-spy shows a per-process object), so
# every collective is taken on the default group: subgroups need the flight recorder.
STACK_SEQ = 0


def stack_call(state: RankState) -> RankState:
    """``state`` with its stack's collective as the call it is inside, where no record gave one (adapter field:
    the judge reads ``calls``)."""
    wait = state.wait
    if wait is None or wait.kind is not WaitKind.COLLECTIVE or wait.call is None or state.calls:
        return state
    call = replace(wait.call, seq=STACK_SEQ, completed=False, seq_from_stack=True)
    return replace(state, calls=(call,), wait=replace(wait, call=call), recorded=True,
                   raw={**state.raw, "seq_from": "stack"})


def progressing(reads: list[RankRead]) -> str | None:
    """Why the job is moving, or None: a rank that waits on another moved between the samples (a new Work, a new
    line), or no rank waits on another at all."""
    waiting = [r for r in reads if r.waits or (r.recorded is not None and r.recorded.wait is not None
                                              and r.recorded.wait.kind not in (WaitKind.NONE, WaitKind.UNKNOWN))]
    if not waiting:
        return "no rank waits on another" if any(r.readable for r in reads) else None
    moved = [r.rank for r in waiting if r.moved]
    if moved:
        return f"rank(s) {', '.join(map(str, moved))} moved between the samples"
    return None


def decide(reads: list[RankRead], world_size: int | None) -> dict:
    """The diagnosis document: {"category": "progressing", "summary", "fix"} or the judge's hang.verdict."""
    why = progressing(reads)
    if why is not None:
        return {"category": "progressing", "summary": f"the job progresses: {why}",
                "fix": "nothing to do now; run attach again if it stops moving", "culprits": [],
                "consequences": [], "named": [], "likely_culprits": []}
    evidence = evidence_of(reads, world_size)
    return words.to_json(judge(evidence), evidence)
