"""The wait-for graph over ranks, and the verdict it leads to.

Edges: a rank inside a group's collective waits for the members not in it (the ones whose last sequence id
is lower, or that left no record); a rank in ``recv(src=k)``/``send(dst=k)`` waits for k; a rank inside
``init_process_group`` or a store wait waits for the ranks its keys name (else for the ranks not there yet).
A rank that waits in nothing (its own code), that exited (0 or a signal) or whose process is stopped or gone
is where waits end. The culprits are the ranks the waits lead to. A cycle, or waits that lead only to ranks
no record places, name no culprit, and the verdict says why. Mismatches (op, sizes, dtypes, splits) are
judged first, by comparing what each rank called (``sizes.py``). Nothing here reads message text.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..evidence.model import P2P_WAITS, Call, Ender, EndKind, JobEvidence, RankState, WaitKind, user_frame
from . import groups, sizes, streams
from .culprits import culprit as _culprit
from .culprits import state_of as _state
from .groups import Finding
from .verdict import Category, Consequence, NoCulprit, Verdict

BAD = {EndKind.STOPPED: Category.PROCESS_STOPPED, EndKind.GONE: Category.PROCESS_GONE}
BY_KIND = {WaitKind.COLLECTIVE: Category.MISSING_RANK, WaitKind.SEND: Category.MISSING_PEER,
           WaitKind.RECV: Category.MISSING_PEER, WaitKind.P2P: Category.MISSING_PEER, WaitKind.INIT: Category.NEVER_INITIALIZED,
           WaitKind.STORE: Category.NEVER_INITIALIZED, WaitKind.BARRIER: Category.MISSING_RANK}


@dataclass
class Edge:
    kind: WaitKind
    targets: tuple[int, ...] | None     # None: it waits, for whom no record says
    call: Call | None = None


def judge(evidence: JobEvidence) -> Verdict:
    """The verdict on a job whose ranks stopped making progress (live) or ended (dumps, logs)."""
    bad = [r for r in sorted(evidence.ranks) if _end(evidence.ranks[r]) in BAD]
    if bad:
        cat = BAD[_end(evidence.ranks[bad[0]])]
        return _finish(Verdict(cat, [_culprit(evidence, r, True, "process_state") for r in bad]), evidence, {})
    findings = _findings(evidence)
    for f in findings:
        odd = sizes.judge_group(f, evidence)
        if odd is not None:
            return _finish(odd, evidence, {r: [Edge(WaitKind.COLLECTIVE, (), f.call)] for r in f.inside})
    p2p = (sizes.judge_p2p(evidence) or sizes.judge_a2a(evidence) or sizes.judge_a2a_totals(evidence)
           or sizes.judge_completed(evidence))
    if p2p is not None:
        return _finish(p2p, evidence, {})
    stuck_stream = streams.not_started(evidence)  # every rank inside, some never started it: their stream
    if stuck_stream is not None:
        return _finish(stuck_stream, evidence, {})
    edges = _edges(evidence, findings)
    if not edges:
        return _finish(_nobody_waits(evidence, findings), evidence, edges)
    return _finish(_follow(evidence, findings, edges), evidence, edges)


def _end(state: RankState) -> EndKind | None:
    return state.ending.kind if state.ending else None


def silent_ranks(evidence: JobEvidence) -> list[int]:
    """Ranks of the job no flight recorder answered for, that are not known to have ended: missing evidence."""
    out = []
    for r in evidence.expected():
        s = evidence.ranks.get(r)
        if s is None or (not s.recorded and _end(s) in (None, EndKind.RUNNING, EndKind.UNKNOWN)
                         and (s.wait is None or s.wait.kind == WaitKind.UNKNOWN)):
            out.append(r)
    return out


def _findings(evidence: JobEvidence) -> list[Finding]:
    """Per group (default first), its newest collective: the ranks inside, the members not inside (a lower
    sequence id, or no entry: with a record that answered, or none at all), the ranks that wait in it."""
    live = evidence.live
    silent = set(silent_ranks(evidence))
    out = []
    views = groups.views(evidence)
    for key in sorted(views, key=groups.order):
        v = views[key]
        waiting = v.waiting()
        if live and not waiting:
            continue
        top = v.top(live)
        if top < 0:
            continue
        inside = sorted(r for r, m in v.members.items() if m.last >= top)
        every = v.ranks if v.ranks is not None else (tuple(evidence.expected()) if key == "0" else ())
        behind = sorted({r for r, m in v.members.items() if m.last < top}
                        | {r for r in every if r not in v.members and r in evidence.ranks and evidence.ranks[r].recorded})
        missing = sorted(set(behind) | {r for r in every if r not in v.members})
        calls = {r: v.members[r].calls[top] for r in inside if top in v.members[r].calls}
        ref = _majority_call(calls)
        waiters = [r for r in inside if r in waiting] if live else inside
        if not live and not missing and len({c.signature() for c in calls.values()}) <= 1:
            continue  # every record ends past the same collective with the same call: nothing differs
        out.append(Finding(v, top, inside, missing, sorted(silent & set(missing)), behind, waiters, ref, calls))
    return out


def _majority_call(calls: dict[int, Call]) -> Call | None:
    from .vote import majority

    sig = majority({r: c.signature() for r, c in calls.items()})
    return next((c for r, c in sorted(calls.items()) if sig is None or c.signature() == sig), None)


def _edges(evidence: JobEvidence, findings: list[Finding]) -> dict[int, list[Edge]]:
    edges: dict[int, list[Edge]] = {}
    for f in findings:
        for r in f.waiters:
            targets = tuple(f.missing)
            if targets:
                edges.setdefault(r, []).append(Edge(WaitKind.COLLECTIVE, targets, f.calls.get(r, f.call)))
    there = {r for r, s in evidence.ranks.items() if s.wait and s.wait.kind in (WaitKind.INIT, WaitKind.STORE)}
    for r, s in sorted(evidence.ranks.items()):
        w = s.wait
        if w is None or r in edges or not waits(s):
            continue
        if w.kind in P2P_WAITS:
            targets = (w.peer,) if w.peer is not None else not_waiting(evidence, r, findings)
            edges[r] = [Edge(w.kind, targets, w.call)]
        elif w.kind in (WaitKind.INIT, WaitKind.STORE, WaitKind.BARRIER):
            awaited = w.awaited if w.awaited is not None else tuple(
                x for x in evidence.expected() if x not in there and x != r)
            edges[r] = [Edge(w.kind, tuple(a for a in awaited if a != r) or None, w.call)]
        elif w.kind == WaitKind.COLLECTIVE and not s.recorded:
            # inside a collective no record of its group places (a stack alone: attach, a library's wait): it
            # waits for the ranks that wait in nothing, as a send/recv whose peer no source names
            edges[r] = [Edge(w.kind, not_waiting(evidence, r, findings), w.call)]
    return edges


def not_waiting(evidence: JobEvidence, rank: int, findings: list[Finding]) -> tuple[int, ...] | None:
    """Whom a send/recv waits for when no source names its peer (faulthandler's stacks have no locals; a
    schedule's batch of P2POps names none on the stack): the ranks of the job that wait in nothing themselves
    (their own code, ended, or no record). A pipeline stage stuck in its own compute leaves its neighbours in
    recv both ways: they lead to it. Several such ranks are all candidates (``_follow`` names them only where
    the evidence places them); none (every rank waits: a schedule's deadlock) is None: nobody named."""
    inside = {x for f in findings for x in f.inside}  # in a collective a record places them in: they wait there
    out = tuple(x for x in evidence.expected() if x != rank and x not in inside and not _waited_itself(evidence, x))
    # A rank that ended of its own or was killed from outside explains the wait; the ranks the launcher stopped
    # after it (SIGTERM, no trace) are consequences, not candidates beside it.
    ended = tuple(x for x in out if _ended_of_its_own(evidence.ranks.get(x)))
    return ended or out or None


def _ended_of_its_own(s: RankState | None) -> bool:
    e = s.ending if s else None
    return e is not None and (e.kind in (EndKind.EXITED, EndKind.EXCEPTION, EndKind.STOPPED, EndKind.GONE) or (
        e.kind == EndKind.SIGNALLED and e.by in (Ender.OUTSIDE, Ender.ITSELF, Ender.UNKNOWN)))


def _follow(evidence: JobEvidence, findings: list[Finding], edges: dict[int, list[Edge]]) -> Verdict:
    """Follow every wait to where it ends: the culprits. Ranks passed on the way waited too (``via``)."""
    inbound: dict[int, WaitKind] = {}
    # a queue and a set: a dump claiming 65,536 ranks gives 131,068 targets (list.pop(0): seconds, quadratic)
    seen, todo, via, on_via = set(), deque(sorted(edges)), [], set()
    while todo:
        r = todo.popleft()
        if r in seen:
            continue
        seen.add(r)
        for e in edges.get(r, []):
            for t in e.targets or ():
                inbound.setdefault(t, e.kind)
                if t in edges and t not in on_via:
                    via.append(t)
                    on_via.add(t)
                if t not in seen:
                    todo.append(t)
    ends = sorted(t for t in inbound if t not in edges and not _waited_itself(evidence, t))
    waiters = sorted(edges)
    unplaced = sorted(t for t in inbound if not (evidence.ranks.get(t) and evidence.ranks[t].recorded)
                      and not _aborted_receiver(evidence, t)
                      and (all(e.targets is None for e in edges[t]) if t in edges else _waited_itself(evidence, t)))
    if not ends and unplaced and not _cycle(edges):
        # the waits lead to ranks that left no record of their call (the rank gloo aborted, its call unknown)
        # while every rank with a record agrees: those are the likely odd ones, not named for certain
        v = Verdict(Category.DESYNC if any(_aborted(evidence, t) for t in unplaced) else Category.MISSING_RANK,
                    [_culprit(evidence, t, False, "unplaced") for t in unplaced], likely=True, no_evidence=unplaced)
        f = next((f for f in findings if unplaced[0] in f.missing), None)
        if f is not None:
            v.call, v.waiting, v.calls = f.call, f.inside, f.calls
        v.evidence.append("unplaced_waiter")
        return v
    if not ends and _cycle(edges):
        odd = _odd_group(evidence, findings, edges)
        if odd is not None:
            return odd
    if not ends and _all_in_init(evidence, edges):
        return Verdict(Category.STUCK_INIT, no_culprit=NoCulprit.EVERYONE, waiting=waiters)
    if not ends:
        why = NoCulprit.CYCLE if _cycle(edges) else NoCulprit.NO_EVIDENCE
        v = Verdict(_category_of_waits(edges), no_culprit=why, waiting=waiters)
        v.call = next((f.call for f in findings), None)
        return v
    silent = set(silent_ranks(evidence))
    culprits = [_culprit(evidence, t, t not in silent, inbound[t].value) for t in ends]
    cat = _category(evidence, ends[0], inbound[ends[0]])
    v = Verdict(cat, culprits, via=sorted(set(via) - set(ends)), no_evidence=sorted(silent & set(ends)))
    v.likely = not evidence.live and bool(v.no_evidence) and len(v.no_evidence) == len(ends)
    f = min((f for f in findings if ends[0] in f.missing), default=None,
            key=lambda f: (len(f.missing), groups.order(f.view.key)))
    if f is not None:
        v.call, v.waiting, v.calls = f.call, f.inside, f.calls
        v.last_seq = {r: m.last for r, m in f.view.members.items()}
    else:
        w = next((e for r in waiters for e in edges[r] if ends[0] in (e.targets or ())), None)
        v.call = w.call if w else None
        v.waiting = sorted(r for r in waiters if any(ends[0] in (e.targets or ()) for e in edges[r]))
    v.evidence.append("wait_for_graph")
    return v


def _odd_group(evidence: JobEvidence, findings: list[Finding], edges: dict[int, list[Edge]]) -> Verdict | None:
    """A cycle across groups where every waiter stands in a collective: ranks 0 and 1 wait in the world's
    all_reduce for rank 2, which waits in a second group's all_reduce (a rank-guarded `if rank == last:`) for
    them. The ranks that stand in a collective the majority of the waiters is not in are the odd ones; two
    equal camps (or a send/recv in the cycle: a schedule's deadlock) name none."""
    from .vote import odd_ones

    if any(e.kind != WaitKind.COLLECTIVE for es in edges.values() for e in es):
        return None
    where = {r: (f.view.key, f.top) for f in findings for r in f.waiters}
    if set(where) != set(edges):
        return None
    odd, major = odd_ones(where)
    if not odd:
        return None
    v = Verdict(Category.DESYNC, [_culprit(evidence, r, True, "odd_group") for r in odd],
                waiting=sorted(r for r in where if where[r] == major))
    f = next((f for f in findings if (f.view.key, f.top) == major), None)
    if f is not None:
        v.call, v.calls = f.call, f.calls
        v.last_seq = {r: m.last for r, m in f.view.members.items()}
    v.evidence.append("odd_group_in_cycle")
    return v


def waits(s: RankState) -> bool:
    """The rank was waiting: its stack or traceback stands in a wait (a collective, send/recv, init, a store),
    and what ended it, if anything, ended it there (an exception raised by the wait: its timeout, a lost peer,
    the backend's abort). Not a rank that exited of its own or was killed from outside: that is where waits end."""
    w, e = s.wait, s.ending
    if w is None or w.kind in (WaitKind.NONE, WaitKind.UNKNOWN):
        return False
    if e is None or e.kind in (EndKind.RUNNING, EndKind.UNKNOWN, EndKind.EXCEPTION):
        return True
    return e.kind == EndKind.SIGNALLED and e.by in (Ender.LAUNCHER, Ender.BACKEND, Ender.PEER_LOSS)


def _waited_itself(evidence: JobEvidence, rank: int) -> bool:
    """A rank that waited (``waits``), or that the backend aborted or that lost its peer, is not where a wait
    ends: it waited too (what it waited for, no record says)."""
    s = evidence.ranks.get(rank)
    if s is None:
        return False
    e = s.ending
    return waits(s) or bool(e and (e.timed_out or e.by in (Ender.BACKEND, Ender.PEER_LOSS)))


def _aborted_receiver(evidence: JobEvidence, rank: int) -> bool:
    """It stood where a peer's wrong size reaches the receiver: a send/recv (a pipeline's stage gloo aborted for
    a message of another size), or an all_to_all (whose parts may differ by rank, so an uneven part says only
    that some sender sent it). Not the likely odd caller of the collective the others then wait in; whom it
    waited for, no record says."""
    s = evidence.ranks.get(rank)
    w = s.wait if s else None
    return w is not None and (w.kind in P2P_WAITS or (w.call is not None and w.call.all_to_all))


def _aborted(evidence: JobEvidence, rank: int) -> bool:
    s = evidence.ranks.get(rank)
    return bool(s and s.ending and s.ending.by == Ender.BACKEND)


def _cycle(edges: dict[int, list[Edge]]) -> bool:
    def reach(start: int) -> bool:
        seen, todo = set(), [t for e in edges.get(start, []) for t in e.targets or ()]
        while todo:
            r = todo.pop()
            if r == start:
                return True
            if r not in seen:
                seen.add(r)
                todo += [t for e in edges.get(r, []) for t in e.targets or ()]
        return False
    return any(reach(r) for r in edges)


def _all_in_init(evidence: JobEvidence, edges: dict[int, list[Edge]]) -> bool:
    """Every rank of the job stands inside init_process_group or a store wait, and none names a rank it waits
    for: nobody is missing, the ranks reached the rendezvous and cannot finish it (its store, the network
    between them, torch's restart)."""
    expected = evidence.expected()
    return bool(expected) and set(expected) <= set(edges) and all(
        e.kind in (WaitKind.INIT, WaitKind.STORE) and not e.targets for r in expected for e in edges[r])


def _category_of_waits(edges: dict[int, list[Edge]]) -> Category:
    kinds = [e.kind for es in edges.values() for e in es]
    return BY_KIND.get(kinds[0], Category.MISSING_RANK) if kinds else Category.UNKNOWN


def _category(evidence: JobEvidence, rank: int, kind: WaitKind) -> Category:
    """What kind of culprit: how it ended, else what it was waited in for."""
    s = evidence.ranks.get(rank)
    e = s.ending if s else None
    if e is not None:
        if e.kind == EndKind.EXITED:
            return Category.ENDED_EARLY
        if e.kind == EndKind.SIGNALLED and e.by in (Ender.OUTSIDE, Ender.UNKNOWN, Ender.ITSELF):
            return Category.KILLED
        if e.kind == EndKind.EXCEPTION:
            return Category.EXCEPTION
    return BY_KIND.get(kind, Category.MISSING_RANK)


def _nobody_waits(evidence: JobEvidence, findings: list[Finding]) -> Verdict:
    """No rank waits for another: all inside the same collective (stuck), every rank in its own code (live),
    or records that end together (dumps)."""
    stuck = next((f for f in findings if f.waiters and not f.missing), None)
    if stuck is not None:
        v = Verdict(Category.STUCK_COLLECTIVE, [_culprit(evidence, r, False, "stuck") for r in stuck.inside],
                    no_culprit=NoCulprit.EVERYONE, call=stuck.call, waiting=stuck.inside, calls=stuck.calls)
        return v
    if not evidence.ranks or not any(s.recorded or s.frames for s in evidence.ranks.values()):
        return Verdict(Category.UNKNOWN, no_culprit=NoCulprit.NO_EVIDENCE)
    if not evidence.live:
        absent = [r for r in evidence.expected() if r not in evidence.ranks or not evidence.ranks[r].recorded]
        if absent:
            v = Verdict(Category.MISSING_RANK, [_culprit(evidence, r, False, "no_record") for r in absent],
                        no_evidence=absent, likely=True)
            v.evidence.append("absent_record")
            return v
        return Verdict(Category.UNKNOWN, no_culprit=NoCulprit.EVERYONE)
    ranks = sorted(evidence.ranks)
    return Verdict(Category.OUTSIDE_COLLECTIVES, [_culprit(evidence, r, True, "own_code") for r in ranks])


def _finish(v: Verdict, evidence: JobEvidence, edges: dict[int, list[Edge]]) -> Verdict:
    """Every rank not named: a consequence, with what it waited in and for whom."""
    named = set(v.culprit_ranks)
    for r in sorted(evidence.ranks):
        if r in named:
            continue
        s = evidence.ranks[r]
        es = edges.get(r) or []
        targets = tuple(sorted({t for e in es for t in e.targets or ()})) or tuple(sorted(named))
        kind = es[0].kind if es else (s.wait.kind if s.wait else WaitKind.UNKNOWN)
        call = es[0].call if es else None
        v.consequences.append(Consequence(
            r, targets, kind, call, user_frame(s.frames), s.host, s.node, s.pid, _state(s),
            aborted=bool(s.ending and s.ending.by == Ender.BACKEND)))
    return v
