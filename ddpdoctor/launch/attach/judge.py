"""attach's judge (an adapter until launch/judge/, the one wait-for judge of issue 30, is in): a wait-for graph
over the ranks as read from outside. A rank in a collective waits for the ranks not in it, a rank in send(dst=k)
or recv(src=k) waits for k, a rank in init for the ranks not there yet; the culprits are the ranks the waits lead
to that wait on no one (in their own code, exited, never started). Two different collectives at once are a
desync (the odd rank named; a tie named as a tie); a cycle of sends/receives is a deadlock; every rank in the
same collective and none moving names no culprit and says so. Decided on the typed reads, worded last."""
from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from ..evidence.pyspy import WaitKind
from .sample import RankRead

_GROUP_WAITS = (WaitKind.COLLECTIVE, WaitKind.BARRIER)


class Category(enum.Enum):
    PROGRESSING = "progressing"
    HANG = "hang"  # waits lead to ranks that wait on no one
    DESYNC = "desync"  # ranks in different collectives
    DEADLOCK = "deadlock"  # send/recv waits in a cycle
    NO_CULPRIT = "no_culprit"  # every rank waits and none moved, without a rank the waits lead to
    UNREADABLE = "unreadable"


@dataclass
class Verdict:
    category: Category
    culprits: list[int] = field(default_factory=list)
    culprit_named: bool = False  # False: the ranks listed are a tie or a cycle, not one culprit
    waiting: dict[int, str] = field(default_factory=dict)  # rank -> what it waits in ("all_reduce", "recv(src=2)")
    elsewhere: list[int] = field(default_factory=list)  # ranks of the job not on the nodes read
    reason: str = ""

    @property
    def stuck(self) -> bool:
        return self.category not in (Category.PROGRESSING, Category.UNREADABLE)


def describe(read: RankRead) -> str:
    wait = read.wait
    if wait is None or wait.kind is WaitKind.NONE:
        return "its own code"
    if wait.kind in (WaitKind.SEND, WaitKind.RECV):
        arg = "dst" if wait.kind is WaitKind.SEND else "src"
        return f"{wait.op}({arg}={wait.peer if wait.peer is not None else '?'})"
    return wait.op or wait.kind.value


def judge(reads: list[RankRead], world_size: int | None, all_here: bool) -> Verdict:
    """``all_here``: every rank of the world should run on the nodes read (a missing one exited or never came)."""
    ok = [r for r in reads if r.readable]
    world = set(range(world_size)) if world_size else {r.rank for r in reads}
    here = {r.rank for r in reads}
    elsewhere = sorted(world - here) if not all_here else []
    if not ok:
        return Verdict(Category.UNREADABLE, reason="no rank could be read")
    waiting = {r.rank: r for r in ok if r.wait is not None and r.wait.kind is not WaitKind.NONE}
    described = {rank: describe(r) for rank, r in waiting.items()}
    if not waiting or any(r.moved for r in waiting.values()):
        why = "no rank waits on another" if not waiting else "ranks that wait moved between the samples"
        return Verdict(Category.PROGRESSING, waiting=described, elsewhere=elsewhere, reason=why)
    desync = _desync(waiting)
    if desync is not None:
        desync.waiting, desync.elsewhere = described, elsewhere
        return desync
    edges = {rank: _targets(r, waiting, world) for rank, r in waiting.items()}
    sinks = _reach(edges, set(waiting))
    unread = {r.rank for r in reads if not r.readable}
    local_sinks = sorted(s for s in sinks if (s in here or all_here) and s not in unread)
    if local_sinks:
        return Verdict(Category.HANG, local_sinks, True, described, elsewhere,
                       "the waits lead to rank(s) that wait on no one")
    if sinks:  # only ranks on nodes not read, or ranks here that could not be read
        where = "that could not be read" if sinks <= unread else "on other nodes, not read here"
        return Verdict(Category.HANG, sorted(sinks), False, described, elsewhere,
                       f"the waits lead to rank(s) {where}")
    p2p = [r for r in waiting.values() if r.wait.kind in (WaitKind.SEND, WaitKind.RECV)]
    if p2p:
        return Verdict(Category.DEADLOCK, sorted(r.rank for r in p2p), False, described, elsewhere,
                       "the sends and receives wait on each other in a cycle")
    return Verdict(Category.NO_CULPRIT, [], False, described, elsewhere,
                   "every rank waits in the same call and none moved: no rank holds the others up")


def _desync(waiting: dict[int, RankRead]) -> Verdict | None:
    ops = {rank: r.wait.op for rank, r in waiting.items() if r.wait.kind in _GROUP_WAITS}
    counts = Counter(ops.values())
    if len(counts) < 2:
        return None
    ranked = counts.most_common()
    if ranked[0][1] == ranked[1][1]:
        return Verdict(Category.DESYNC, sorted(ops), False,
                       reason=f"ranks wait in different collectives ({', '.join(sorted(counts))}) with no majority")
    majority = ranked[0][0]
    odd = sorted(rank for rank, op in ops.items() if op != majority)
    return Verdict(Category.DESYNC, odd, True, reason=f"the others wait in {majority}")


def _targets(read: RankRead, waiting: dict[int, RankRead], world: set[int]) -> set[int]:
    wait = read.wait
    if wait.kind in (WaitKind.SEND, WaitKind.RECV):
        return {wait.peer} if wait.peer is not None else world - {read.rank}
    if wait.kind is WaitKind.INIT:
        return {r for r in world if r not in waiting or waiting[r].wait.kind is not WaitKind.INIT}
    return {r for r in world if r not in waiting or waiting[r].wait.op != wait.op}


def _reach(edges: dict[int, set[int]], waiting: set[int]) -> set[int]:
    """The ranks the waits lead to that wait on no one (not in ``waiting``)."""
    seen, stack, sinks = set(), list(edges), set()
    while stack:
        rank = stack.pop()
        if rank in seen:
            continue
        seen.add(rank)
        if rank not in waiting:
            sinks.add(rank)
            continue
        stack.extend(edges.get(rank, ()))
    return sinks
