"""Mismatches: ranks that called different things where they should have called the same. Judged by comparing
what each rank called (op, sizes, dtypes, splits), never by what the backend said: the rank gloo aborts is
the one that received a message of another size, which need not be the one whose call differs.

- a collective: the calls at one sequence id of one group; the majority's call is right, the minority named;
  on a tie the call new to the job (nowhere earlier) is the odd one, else no rank is named;
- a send and its recv: the sizes a rank sent against the sizes its peer posted; the pipeline's other
  transfers (and the same rank's earlier ones) are the majority that decides which end is wrong.
"""
from __future__ import annotations

from ..evidence.model import Call, JobEvidence
from . import groups, vote
from .culprits import culprit as _culprit
from .groups import Finding
from .verdict import Category, NoCulprit, Verdict


def what_differs(calls: list[Call]) -> str:
    """Which part of the calls differs first: "op", "sizes", "dtypes" or "splits"."""
    for name, part in (("op", lambda c: c.op), ("sizes", lambda c: c.input_sizes), ("dtypes", lambda c: c.dtypes),
                       ("splits", lambda c: c.splits)):
        if len({part(c) for c in calls}) > 1:
            return name
    return "sizes"


def judge_group(f: Finding, evidence: JobEvidence) -> Verdict | None:
    """A desync at the group's newest collective, when every member entered it and their calls differ."""
    if f.behind or len({c.signature() for c in f.calls.values()}) <= 1:
        return None
    sigs = {r: c.signature() for r, c in f.calls.items()}
    odd, major = vote.odd_ones(sigs)
    v = Verdict(Category.DESYNC, call=f.call, calls=dict(f.calls), waiting=f.inside,
                mismatch=what_differs(list(f.calls.values())), no_evidence=list(f.silent))
    v.last_seq = {r: m.last for r, m in f.view.members.items()}
    if major is None:
        earlier = groups.history(f.view, f.top)
        odd = vote.new_ones({r: (c.op, c.site.where if c.site else None) for r, c in f.calls.items()}, earlier)
        v.evidence.append("tie_new_call" if odd else "tie")
        if not odd:
            v.no_culprit = NoCulprit.TIE
        else:
            v.call = next((c for r, c in sorted(f.calls.items()) if r not in odd), f.call)
    else:
        v.evidence.append("majority")
        v.call = next(c for r, c in sorted(f.calls.items()) if c.signature() == major)
    v.culprits = [_culprit(evidence, r, True, "mismatch") for r in odd]
    for c in v.culprits:  # where it made the odd call: the call's own site, else its stack
        own = f.calls.get(c.rank)
        if own is not None and own.site is not None and c.where is None:
            c.where = own.site
    return v


def judge_p2p(evidence: JobEvidence) -> Verdict | None:
    """A send whose sizes differ from what its peer's recv posted. Each rank's last send/recv (``calls`` with a
    peer, from the bootstrap's point-to-point log or py-spy's locals); the transfers of the whole job vote on
    the right sizes for that pair's op: the end whose sizes no other transfer used is the odd one."""
    sends = {r: c for r, s in evidence.ranks.items() for c in s.calls if c.op == "send" and c.peer is not None}
    recvs = {r: c for r, s in evidence.ranks.items() for c in s.calls if c.op == "recv" and c.peer is not None}
    for src, send in sorted(sends.items()):
        recv = recvs.get(send.peer)
        if recv is None or recv.peer != src or (send.input_sizes, send.dtypes) == (recv.input_sizes, recv.dtypes):
            continue
        seen = {(c.input_sizes, c.dtypes) for r, s in evidence.ranks.items() for c in s.calls
                if c.op in ("send", "recv") and c is not send and c is not recv}
        odd = [r for r, c in ((src, send), (send.peer, recv)) if (c.input_sizes, c.dtypes) not in seen]
        v = Verdict(Category.DESYNC, call=send, calls={src: send, send.peer: recv}, waiting=[send.peer],
                    mismatch="dtypes" if send.dtypes != recv.dtypes else "sizes")
        if len(odd) == 1:
            v.culprits = [_culprit(evidence, odd[0], True, "p2p_mismatch")]
            own = send if odd[0] == src else recv
            v.culprits[0].where = own.site or v.culprits[0].where  # where it made the odd call
            v.evidence.append("p2p_majority")
        else:
            v.no_culprit = NoCulprit.TIE
            v.evidence.append("p2p_tie")
        return v
    return None


def _even(c: Call, world: int, out: bool) -> tuple | None:
    """An all_to_all's splits as called; None given means equal parts of its tensor."""
    given = (c.splits or (None, None))[1 if out else 0]
    if given:
        return given
    sizes = c.output_sizes if out else c.input_sizes
    try:
        n = sizes[0][0]
    except (IndexError, TypeError):
        return None
    return tuple([n // world] * world) if world and n % world == 0 else None


def judge_a2a(evidence: JobEvidence) -> Verdict | None:
    """all_to_all_single: what rank r sends to rank k (its input split k) must be what k expects from r (its
    output split r), for the same call (the n-th all_to_all of each rank). A pair that disagrees says only that
    one of the two is wrong; the sender named is the one whose part for some rank differs from what every rank
    sends that rank (the column's majority, that rank's own part included). Else no rank is named (a tie)."""
    a2a = {r: [c for c in s.calls if c.all_to_all and c.seq is None] for r, s in evidence.ranks.items()}
    a2a = {r: cs for r, cs in a2a.items() if cs}
    if len(a2a) < 2:
        return None
    n = min(len(cs) for cs in a2a.values())
    if n == 0:
        return None
    world = len(evidence.expected())
    calls = {r: cs[-1] if len(cs) == n else cs[n - 1] for r, cs in a2a.items()}
    sent = {r: _even(c, world, out=False) for r, c in calls.items()}
    want = {r: _even(c, world, out=True) for r, c in calls.items()}
    bad: dict[int, int] = {}
    for r in calls:
        for k in calls:
            s, w = sent.get(r), want.get(k)
            if s is None or w is None or k >= len(s) or r >= len(w) or s[k] == w[r]:
                continue
            bad[r] = bad.get(r, 0) + 1
            bad[k] = bad.get(k, 0) + 1
    if not bad:
        return None
    # each receiver's column: what every sender sends it; the sender unlike the others in some column is odd
    odd = sorted({r for k in calls for r in _column_odd(sent, k)} & set(bad))
    v = Verdict(Category.DESYNC, call=calls[min(bad)], calls=calls, waiting=sorted(calls), mismatch="splits")
    if len(odd) == 1:
        v.culprits = [_culprit(evidence, odd[0], True, "a2a_splits")]
        v.culprits[0].where = calls[odd[0]].site or v.culprits[0].where  # where it made the odd call
        v.call = calls[odd[0]]
        v.evidence.append("a2a_column_majority")
    else:
        v.no_culprit = NoCulprit.TIE
        v.evidence.append("a2a_tie")
    return v


def _column_odd(sent: dict[int, tuple | None], k: int) -> list[int]:
    column = {r: s[k] for r, s in sent.items() if s is not None and k < len(s)}  # k's own part too
    odd, _ = vote.odd_ones(column) if len(column) >= 2 else ([], None)
    return odd
