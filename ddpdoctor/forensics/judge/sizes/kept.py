"""The size judge's rules on the sizes run-trainer's size watch kept (evidence/call_sizes.py, Python 3.12+): each
send paired with its receive, an all-to-all's parts with what each receiver expects, and the verdict adopted
into a failed job's root cause (judge/sizes/__init__.py says how)."""
from __future__ import annotations

from dataclasses import dataclass

from ....human import human_bytes
from ...evidence.call_sizes import Call as KeptCall
from ...evidence.model import RankFailure
from ..verdict import Findings


@dataclass(frozen=True)
class SizeMismatch:
    op: str  # "send/recv" or "all_to_all"
    sender: int
    receiver: int
    sent: int  # bytes
    expected: int
    culprits: tuple[int, ...]  # one rank when the history tells, else both
    sender_call: KeptCall
    receiver_call: KeptCall

    @property
    def named(self) -> bool:
        return len(self.culprits) == 1

    @property
    def culprit_call(self) -> KeptCall:
        return self.sender_call if self.culprits == (self.sender,) else self.receiver_call


def find(calls: dict[int, list[KeptCall]]) -> SizeMismatch | None:
    """The first pair (in time) whose sizes disagree, or None."""
    found = _p2p(calls) + _all_to_all(calls)
    return min(found, key=lambda m: max(m.sender_call.t, m.receiver_call.t)) if found else None


def unnoticed(calls: dict[int, list[KeptCall]]) -> SizeMismatch | None:
    """In a job that ended normally: the first all_to_all whose splits disagree (the backend let it pass)."""
    found = _all_to_all(calls)
    return min(found, key=lambda m: max(m.sender_call.t, m.receiver_call.t)) if found else None


def warning(m: SizeMismatch) -> dict:
    """What a normally ended job is told of such a mismatch: the words, the rank, its call and the fix."""
    culprit = m.culprits[0] if m.named else None
    return {"rank": culprit, "location": m.culprit_call.where if culprit is not None else None,
            "message": (f"the job ended normally, but its data is not what it sent: {describe(m)}; the receiver's "
                        "buffer kept values the sender never wrote (gloo accepts a shorter message; NCCL may hang "
                        "or corrupt memory on the same code)"),
            "fix": FIX}


def _p2p(calls: dict[int, list[KeptCall]]) -> list[SizeMismatch]:
    sends = {(c.group, c.rank, c.peer, c.k): c for cs in calls.values() for c in cs if c.op == "send"}
    recvs = {(c.group, c.peer, c.rank, c.k): c for cs in calls.values() for c in cs if c.op == "recv"}
    out = []
    for key, sent in sends.items():
        got = recvs.get(key)
        if got is None or sent.sizes == got.sizes:
            continue
        group, src, dst, k = key
        before_sent, before_got = sends.get((group, src, dst, k - 1)), recvs.get((group, src, dst, k - 1))
        out.append(_decide("send/recv", src, dst, sent.sizes[0], got.sizes[0], sent, got,
                           _changed(before_sent, sent.sizes), _changed(before_got, got.sizes)))
    return out


def _all_to_all(calls: dict[int, list[KeptCall]]) -> list[SizeMismatch]:
    by_call: dict[tuple, dict[int, KeptCall]] = {}
    for cs in calls.values():
        for c in cs:
            if c.op == "all_to_all":
                by_call.setdefault((c.group, c.k), {})[c.rank] = c
    out = []
    for (group, k), members in sorted(by_call.items(), key=lambda item: item[0][1]):
        order = list(group) if group is not None else list(range(max(len(c.sizes) for c in members.values())))
        before = by_call.get((group, k - 1), {})
        for i, src in enumerate(order):
            for j, dst in enumerate(order):
                a, b = members.get(src), members.get(dst)
                if a is None or b is None or j >= len(a.sizes) or i >= len(b.expects) or a.sizes[j] == b.expects[i]:
                    continue
                pa, pb = before.get(src), before.get(dst)
                out.append(_decide("all_to_all", src, dst, a.sizes[j], b.expects[i], a, b,
                                   pa is not None and j < len(pa.sizes) and pa.sizes[j] != a.sizes[j],
                                   pb is not None and i < len(pb.expects) and pb.expects[i] != b.expects[i],
                                   known=pa is not None and pb is not None))
    return out


def _changed(before: KeptCall | None, sizes: tuple[int, ...]) -> bool | None:
    return None if before is None else before.sizes != sizes


def _decide(op: str, src: int, dst: int, sent: int, expected: int, a: KeptCall, b: KeptCall, sender_changed: bool | None,
            receiver_changed: bool | None, known: bool = True) -> SizeMismatch:
    culprits: tuple[int, ...] = (src, dst)
    if known and sender_changed is not None and receiver_changed is not None and sender_changed != receiver_changed:
        culprits = (src,) if sender_changed else (dst,)
    return SizeMismatch(op, src, dst, sent, expected, culprits, a, b)


def describe(m: SizeMismatch) -> str:
    """The mismatch as a sentence, the numbers as a person reads them."""
    what = (f"rank {m.sender} sent rank {m.receiver} {human_bytes(m.sent)} in {m.op} #{m.sender_call.k + 1} "
            f"({m.sender_call.shape}), which expected {human_bytes(m.expected)} ({m.receiver_call.shape})")
    if not m.named:
        return what + "; both sizes differ from their previous call (or there is none): either may be wrong"
    odd = m.culprit_call
    other = m.receiver if m.culprits == (m.sender,) else m.sender
    return (what + f"; rank {odd.rank}'s size changed from its previous call on this channel, rank {other}'s "
            "did not")


FIX = ("make the sizes agree: a send's tensor must have the shape the receiver allocated, and all_to_all's "
       "input splits of each rank must match what the receiving rank's output splits expect from it (exchange "
       "the split sizes first, e.g. with an all_to_all of the counts)")


def adopt(verdict: Findings, mismatch: SizeMismatch | None) -> None:
    """A job gloo aborted on a message of another size: the kept sizes say who sent it. The rank gloo aborted
    (the receiver) becomes a consequence that detected the mismatch, unless the sizes name it."""
    root = verdict.root_cause
    if mismatch is None or root is None or root.category != "desync" or root.named is not False:
        return  # only a mismatch nobody could pin (DETECTOR): a named culprit from other evidence stays
    culprit = mismatch.culprits[0] if mismatch.named else None
    call = mismatch.culprit_call
    new = RankFailure(rank=culprit, local_rank=None, host=root.host, exit_code=None, attempt=root.attempt,
                      category="desync", error_type="size_mismatch",
                      message=describe(mismatch), location=call.where if culprit is not None else None, fix=FIX)
    new.named = True if culprit is not None else False
    old = [root, *verdict.consequences]
    consequences = []
    for f in old:
        if culprit is not None and f.rank == culprit:  # the culprit's own ending, not a consequence of itself
            new.local_rank, new.exit_code, new.signal, new.host = f.local_rank, f.exit_code, f.signal, f.host or new.host
            continue
        f.victim = True
        if f is root:
            f.reason = (f"gloo aborted it on receiving {human_bytes(mismatch.sent)} where it expected "
                        f"{human_bytes(mismatch.expected)}: it detected the mismatch"
                        + (", it did not cause it" if culprit is not None and culprit != f.rank else ""))
        consequences.append(f)
    verdict.root_cause, verdict.consequences = new, consequences
