"""A culprit as the judge names it: the rank, where it stands (its innermost user frame, else where its wait
was called), its process, its last recorded call, and how it ended when it ended of its own."""
from __future__ import annotations

from ..evidence.model import EndKind, JobEvidence, RankState, user_frame
from .verdict import Culprit


def culprit(evidence: JobEvidence, rank: int, named: bool, why: str) -> Culprit:
    s = evidence.ranks.get(rank)
    if s is None:
        return Culprit(rank, named, why=why)
    last = s.calls[-1] if s.calls else None
    where = user_frame(s.frames) or (s.wait.site if s.wait else None)
    ended = None
    if s.ending and s.ending.kind == EndKind.EXITED and s.ending.exit_code is not None:
        ended = {"exit_code": s.ending.exit_code, "where": s.ending.where.where if s.ending.where else None}
    return Culprit(rank, named, where=where, host=s.host, node=s.node, pid=s.pid, state=state_of(s), why=why,
                   last_seen=last, ended=ended)


def state_of(s: RankState) -> str | None:
    return s.raw.get("state") if isinstance(s.raw.get("state"), str) else None
