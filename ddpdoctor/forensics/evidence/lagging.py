"""Live records that lag behind the rank: a collective gloo has not yet marked completed on one rank, while every
other member of its group completed it and the rank's own stack stands in its own code.

gloo marks an async collective completed on a rank only when that rank's side of it is retired, which may come
long after the rank went on: seen with Lightning's DDP (issue 37), the hung rank's record still had the previous
step's gradient all_reduce (#22) and this step's broadcast (#23) pending, 8 s after its peer had completed both
and waited in #24, while its stack stood in its training_step. Taken at its word, the record made the culprit a
rank "waiting in all_reduce #22", and no culprit was named (1 run in 8 under load).

Both facts are needed before the record is set aside: every other member of the group (each with a record)
completed that collective, so the rank's part of it is done or all but done; and the rank's live stack is in
its own code, so it is not blocked in any wait now (a stack inside a collective, a library's wait or an
unreadable stack keeps the record's word). The rank is then in its own code, at its stack's site.
"""
from __future__ import annotations

from dataclasses import replace

from . import stacks
from .model import Call, JobEvidence, RankState, Wait, WaitKind, user_frame


def settle(evidence: JobEvidence) -> JobEvidence:
    """``evidence`` with each lagging rank's record wait replaced by its stack's (its own code); unchanged when
    it was not taken live or no rank lags."""
    if not evidence.live:
        return evidence
    settled = {r: _settled(r, s, evidence) for r, s in evidence.ranks.items()}
    if all(settled[r] is s for r, s in evidence.ranks.items()):
        return evidence
    return replace(evidence, ranks=settled, notes=list(evidence.notes))


def _settled(rank: int, state: RankState, evidence: JobEvidence) -> RankState:
    wait = state.wait
    call = wait.call if wait is not None else None
    if wait is None or wait.kind != WaitKind.COLLECTIVE or call is None or call.seq is None or call.seq_from_stack:
        return state
    if not state.frames or stacks.wait_of(state.frames).kind != WaitKind.NONE:
        return state
    peers = _members(call, rank, evidence)
    if not peers or not all(_completed(evidence.ranks.get(p), call) for p in peers):
        return state
    calls = tuple(replace(c, completed=True) if _same_group(c, call) and c.seq is not None and not c.completed
                  and all(_completed(evidence.ranks.get(p), c) for p in peers) else c
                  for c in state.calls)  # each one its peers completed (#22 and #23 of issue 37's run)
    return replace(state, wait=Wait(WaitKind.NONE, site=user_frame(state.frames)), calls=calls)


def _members(call: Call, rank: int, evidence: JobEvidence) -> list[int]:
    """The group's other members: as its record names them, else every rank whose record has that group."""
    members = call.group.ranks
    if members is None:
        members = tuple(r for r, s in evidence.ranks.items() if any(_same_group(c, call) for c in s.calls))
    return [m for m in members if m != rank]


def _same_group(a: Call, b: Call) -> bool:
    return a.group.key == b.group.key


def _completed(state: RankState | None, call: Call) -> bool:
    """This member completed ``call`` (or a later collective of its group: a group completes in order)."""
    if state is None or not state.recorded:
        return False
    return any(_same_group(c, call) and c.seq is not None and c.seq >= call.seq and c.completed
               for c in state.calls)
