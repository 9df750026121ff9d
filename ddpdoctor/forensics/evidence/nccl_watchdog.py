"""NCCL's own watchdog timeout lines as evidence: which collective each rank timed out in, how far it had
enqueued and completed, and so which rank is behind; and whether the job aborted itself on that timeout (then
it was not stopped from outside).

Legacy ProcessGroupNCCL (torch 2.13, 2.14, 2.15's "nccl-legacy") writes
``[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=4,
NumelOut=4, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.`` and
``[PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 5, last enqueued NCCL work: 5, last completed
NCCL work: 4.``; torch 2.15's nccl2 writes ``Watchdog caught collective operation timeout: NCCL operation timed
out`` and ``Operation timed out after <N> ms`` with no sequence numbers (the rank is known, its place is not).
Pure: text in, typed facts out; ``behind`` is the rule a caller (the judge's decide) applies."""
from __future__ import annotations

import re
from dataclasses import dataclass

RANK = re.compile(r"\[(?:PG ID \S+ PG GUID \S+ )?Rank (\d{1,7})\]")
WORK = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=([A-Z_]+)(?:,[^)]*?Timeout\(ms\)=(\d+))?[^)]*\)"
                  r"(?: ran for (\d+) milliseconds)?")
PROGRESS = re.compile(r"Timeout at NCCL work: (-?\d+), last enqueued NCCL work: (-?\d+), "
                      r"last completed NCCL work: (-?\d+)")
NCCL2 = re.compile(r"Watchdog caught collective operation timeout: NCCL operation timed out"
                   r"|Operation timed out after (\d+) ?ms")


@dataclass(frozen=True)
class WatchdogTimeout:
    """One rank's NCCL watchdog timeout. ``seq``/``op``: the work it timed out in (legacy only); ``enqueued``/
    ``completed``: its last enqueued and completed work; ``backend``: "nccl" (legacy) or "nccl2"."""
    rank: int | None
    backend: str
    seq: int | None = None
    op: str | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    enqueued: int | None = None
    completed: int | None = None


def parse(text: str, rank: int | None = None) -> list[WatchdogTimeout]:
    """Every watchdog timeout in a rank's log (``rank``: the log's global rank; the lines' own "Rank N" is the
    rank in the line's process group, used only where the log's rank is not known), in order;
    a legacy WorkNCCL line and its "Timeout at NCCL work" line become one."""
    out: list[WatchdogTimeout] = []
    for line in text.splitlines():
        m_rank = RANK.search(line)  # "[PG ... Rank N]" is the rank in that group: the log's own rank first
        who = rank if rank is not None else int(m_rank.group(1)) if m_rank else None
        work, progress, nccl2 = WORK.search(line), PROGRESS.search(line), NCCL2.search(line)
        if work and "Watchdog caught" in line:
            out.append(WatchdogTimeout(who, "nccl", int(work[1]), work[2].lower(), _int(work[3]), _int(work[4])))
        elif progress:
            seq, enq, done = (int(g) for g in progress.groups())
            last = out[-1] if out and out[-1].rank == who and out[-1].backend == "nccl" else None
            base = last or WatchdogTimeout(who, "nccl", seq)
            merged = WatchdogTimeout(base.rank, "nccl", base.seq if base.seq is not None else seq, base.op,
                                     base.timeout_ms, base.ran_ms, enq, done)
            if last is not None:
                out[-1] = merged
            else:
                out.append(merged)
        elif nccl2:
            if out and out[-1].rank == who and out[-1].backend == "nccl2":
                if nccl2.group(1):
                    out[-1] = WatchdogTimeout(who, "nccl2", ran_ms=int(nccl2.group(1)))
                continue
            out.append(WatchdogTimeout(who, "nccl2", ran_ms=_int(nccl2.group(1))))
    return out


def _int(v) -> int | None:
    return int(v) if v is not None else None


@dataclass(frozen=True)
class Behind:
    """What the timeouts say of the ranks: ``behind`` never enqueued the work the others timed out in (named),
    ``timed_out`` the ranks whose watchdog fired, ``seq`` that work; ``aborted_itself``: the job ended on its own
    NCCL timeout (not stopped from outside)."""
    seq: int | None
    behind: tuple[int, ...]
    timed_out: tuple[int, ...]
    aborted_itself: bool


def behind(timeouts: dict[int, list[WatchdogTimeout]], world: list[int]) -> Behind | None:
    """From every rank's timeouts (rank -> parse(its log)) and the job's ranks: the work the most ranks timed out
    in (of equally many, the furthest: a rank that timed out in an earlier one is behind it), and the ranks
    behind it: a rank whose last enqueued work is below it (its own line says so), or, when
    every rank that timed out has sequence numbers, a rank of the job that timed out in nothing or in an earlier
    work. nccl2's lines carry no numbers: only ``timed_out`` and ``aborted_itself`` are said. None: no timeout."""
    last = {r: ts[-1] for r, ts in timeouts.items() if ts}
    if not last:
        return None
    seqs = [t.seq for t in last.values() if t.seq is not None]
    seq = max(set(seqs), key=lambda s: (seqs.count(s), s)) if seqs else None  # a tie: the furthest work
    named: set[int] = set()
    if seq is not None:
        named |= {r for r, t in last.items() if t.enqueued is not None and t.enqueued < seq}
        named |= {r for r, t in last.items() if t.seq is not None and t.seq < seq}
        if all(t.seq is not None for t in last.values()):
            named |= {r for r in world if r not in last}
    timed_out = tuple(sorted(r for r, t in last.items() if r not in named))
    return Behind(seq, tuple(sorted(named)), timed_out, aborted_itself=True)
