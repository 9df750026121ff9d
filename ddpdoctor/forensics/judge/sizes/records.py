"""The size judge's rules on the calls the ranks' records show (evidence/model.py's Call: flight recorder, stacks,
py-spy's locals): a collective's members, a send and its receive, an all_to_all's splits or totals, a completed
collective's sizes. The package's docstring (judge/sizes/__init__.py) says what each decides."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...evidence.model import Call, JobEvidence
from .. import groups, vote
from ..culprits import culprit as _culprit
from ..groups import Finding
from ..verdict import Category, NoCulprit, Verdict


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


# Collectives whose every member must pass the same sizes (scatter/gather/all_to_all/all_gather lists differ by
# rank on purpose); torch's and NCCL's spellings.
SAME_SIZES = frozenset({"all_reduce", "allreduce", "broadcast", "reduce", "barrier"})


def judge_completed(evidence: JobEvidence) -> Verdict | None:
    """The first collective, completed or not, whose members' records disagree on sizes or dtypes where they must
    agree (``SAME_SIZES``): an uneven broadcast NCCL or gloo let pass (fr_trace's size mismatch of completed
    entries). The majority of the members' calls is right; on a tie no rank is named. Needs two members'
    records of the same call (same group, same sequence id)."""
    by_call: dict[tuple[str, int], dict[int, Call]] = {}
    for r, s in evidence.ranks.items():
        for c in s.calls:
            if c.seq is not None and not c.seq_from_stack and c.op in SAME_SIZES:
                by_call.setdefault((c.group.key, c.seq), {})[r] = c
    for (_, _seq), calls in sorted(by_call.items(), key=lambda item: (item[0][1], item[0][0])):
        if len(calls) < 2 or len({(c.op, c.input_sizes, c.dtypes) for c in calls.values()}) <= 1:
            continue
        odd, major = vote.odd_ones({r: (c.op, c.input_sizes, c.dtypes) for r, c in calls.items()})
        v = Verdict(Category.DESYNC, call=next(iter(calls.values())), calls=dict(calls), waiting=sorted(calls),
                    mismatch=what_differs(list(calls.values())))
        if major is None:
            v.no_culprit = NoCulprit.TIE
            v.evidence.append("record_sizes_tie")
            return v
        v.call = next(c for r, c in sorted(calls.items()) if (c.op, c.input_sizes, c.dtypes) == major)
        v.culprits = [_culprit(evidence, r, True, "record_sizes") for r in odd]
        for c in v.culprits:
            c.where = calls[c.rank].site or c.where
        v.evidence += ["majority", "record_sizes_majority"]
        return v
    return None


def numel(sizes: tuple) -> int | None:
    """Elements in a record's ``input_sizes``/``output_sizes`` (a list of tensor shapes); None when unreadable."""
    try:
        return sum(math.prod(int(d) for d in shape) for shape in sizes)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class TotalsFinding:
    """An all_to_all whose members' records do not add up: ``put``/``took`` per rank (elements), ``checked``:
    every member's record was there and the totals differ (else only the one rank whose input alone changed)."""
    group: str
    seq: int
    put: dict[int, int]
    took: dict[int, int]
    changed: tuple[int, ...]      # ranks whose input changed from their own previous all_to_all on the group
    checked: bool


def a2a_totals(evidence: JobEvidence) -> TotalsFinding | None:
    """The first all_to_all (group, sequence id) of the records whose sizes cannot be right: the elements all
    members put in differ from the elements all take out (every member's record there), or, a member's record
    missing, exactly one rank's input changed from its previous all_to_all while every other rank's input and
    output stayed as they were (a router whose splits move every step changes every rank: nothing is said)."""
    by_call: dict[tuple[str, int], dict[int, Call]] = {}
    members: dict[str, set[int]] = {}
    for r, s in evidence.ranks.items():
        for c in s.calls:
            if c.all_to_all and c.seq is not None and not c.seq_from_stack:
                by_call.setdefault((c.group.key, c.seq), {})[r] = c
                members.setdefault(c.group.key, set(c.group.ranks or ())).add(r)
    previous: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    for (group, seq), calls in sorted(by_call.items(), key=lambda item: (item[0][1], item[0][0])):
        put = {r: numel(c.input_sizes) for r, c in calls.items()}
        took = {r: numel(c.output_sizes) for r, c in calls.items()}
        if any(v is None for v in (*put.values(), *took.values())):
            continue
        before = {r: previous.get((group, r)) for r in calls}
        changed = tuple(sorted(r for r in calls if before[r] is not None and before[r][0] != put[r]))
        steady = all(before[r] is not None and before[r] == (put[r], took[r]) for r in calls if r not in changed)
        for r in calls:
            previous[(group, r)] = (put[r], took[r])
        whole = members[group] <= set(calls) and len(calls) >= 2
        if whole and sum(put.values()) != sum(took.values()):
            return TotalsFinding(group, seq, put, took, changed, True)
        if not whole and len(changed) == 1 and steady and put[changed[0]] != took[changed[0]]:
            return TotalsFinding(group, seq, put, took, changed, False)
    return None


def judge_a2a_totals(evidence: JobEvidence) -> Verdict | None:
    """An all_to_all the records show cannot add up (``a2a_totals``), as the verdict: the one rank whose input
    changed from its previous call while the others' stayed is named; else a desync without a culprit (a tie)."""
    found = a2a_totals(evidence)
    if found is None:
        return None
    calls = {r: c for r, s in evidence.ranks.items() for c in s.calls
             if c.all_to_all and c.seq == found.seq and c.group.key == found.group}
    v = Verdict(Category.DESYNC, call=calls[min(calls)], calls=calls, waiting=sorted(calls), mismatch="splits")
    if len(found.changed) == 1:
        odd = found.changed[0]
        v.culprits = [_culprit(evidence, odd, True, "a2a_totals")]
        v.culprits[0].where = calls[odd].site or v.culprits[0].where
        v.call = calls[odd]
        v.evidence.append("a2a_totals_changed" if found.checked else "a2a_input_changed")
    else:
        v.no_culprit = NoCulprit.TIE
        v.evidence.append("a2a_totals_tie")
    return v


# How the verdict words the rules above whose tag is in its evidence ({names}: the culprit ranks).
REASONS = {
    "a2a_totals_changed": ("the elements the ranks put in do not add up to those they take out; rank(s) {names}'s "
                           "input alone changed from its previous all_to_all"),
    "a2a_input_changed": ("rank(s) {names}'s input alone changed from its previous all_to_all while every other "
                          "rank's stayed (a member left no record: the totals cannot be added up)"),
    "a2a_totals_tie": ("the elements the ranks put in do not add up to those they take out, and no rank's input "
                       "alone changed: either may be the wrong one"),
}


def unjudged(evidence: JobEvidence) -> str | None:
    """Said once in a verdict where sizes could matter and nothing holds them: the ranks wait in send/recv (or a
    P2POp batch) and no record or kept call gives its sizes (gloo records no send/recv; the size watch needs
    Python 3.12). None where a source holds them or no rank waits in a send/recv."""
    from ...evidence.model import P2P_WAITS

    p2p = [r for r, s in evidence.ranks.items() if s.wait is not None and s.wait.kind in P2P_WAITS]
    if not p2p:
        return None
    if any(c.op in ("send", "recv") and c.input_sizes for s in evidence.ranks.values() for c in s.calls):
        return None
    return ("the send/recv sizes are in no record (gloo records no send/recv; run-trainer's size watch needs "
            "Python 3.12+): a wrong-sized message cannot be told from a missing one")
