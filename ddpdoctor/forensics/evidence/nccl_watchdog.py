"""NCCL's own watchdog timeout lines as evidence: which collective each rank timed out in, how far it had
enqueued and completed, and so which rank is behind; and whether the job aborted itself on that timeout (then
it was not stopped from outside).

Legacy ProcessGroupNCCL (torch 2.13, 2.14, 2.15's "nccl-legacy") writes
``[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=4,
NumelOut=4, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.`` and
``[PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 5, last enqueued NCCL work: 5, last completed
NCCL work: 4.``: a SeqNum counts one process group's works (the "[PG ID 0 PG GUID 0(default_pg) Rank 1]"
prefix names the group; the GUID is the same on every rank), so lines of different groups are never compared.
torch 2.15's nccl2 writes ``Watchdog caught collective operation timeout: NCCL operation timed
out`` and ``Operation timed out after <N> ms`` with no sequence numbers (the rank is known, its place is not).
Pure: text in, typed facts out; ``behind`` is the rule a caller (the judge's decide) applies."""
from __future__ import annotations

import re
from dataclasses import dataclass

RANK = re.compile(r"\[(?:PG ID \S+ PG GUID \S+ )?Rank (\d{1,7})\]")
GROUP = re.compile(r"\[PG ID \S+ PG GUID ([^\s(]+)(?:\(([^)\s]*)\))? Rank \d{1,7}\]")  # GUID, its description
DEFAULT_GROUPS = ("0", "default_pg")  # the default group's GUID and description: every rank of the job is in it
WORK = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=([A-Z_]+)(?:,[^)]*?Timeout\(ms\)=(\d+))?[^)]*\)"
                  r"(?: ran for (\d+) milliseconds)?")
PROGRESS = re.compile(r"Timeout at NCCL work: (-?\d+), last enqueued NCCL work: (-?\d+), "
                      r"last completed NCCL work: (-?\d+)")
NCCL2 = re.compile(r"Watchdog caught collective operation timeout: NCCL operation timed out"
                   r"|Operation timed out after (\d+) ?ms")


@dataclass(frozen=True)
class WatchdogTimeout:
    """One rank's NCCL watchdog timeout. ``seq``/``op``: the work it timed out in (legacy only); ``enqueued``/
    ``completed``: its last enqueued and completed work; ``backend``: "nccl" (legacy) or "nccl2"; ``group``: the
    process group's GUID and ``group_desc`` its description, when the lines say them."""
    rank: int | None
    backend: str
    seq: int | None = None
    op: str | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    enqueued: int | None = None
    completed: int | None = None
    group: str | None = None
    group_desc: str | None = None


def parse(text: str, rank: int | None = None) -> list[WatchdogTimeout]:
    """Every watchdog timeout in a rank's log (``rank``: the log's global rank; the lines' own "Rank N" is the
    rank in the line's process group, used only where the log's rank is not known), in order;
    a legacy WorkNCCL line and its "Timeout at NCCL work" line become one."""
    out: list[WatchdogTimeout] = []
    for line in text.splitlines():
        m_rank = RANK.search(line)  # "[PG ... Rank N]" is the rank in that group: the log's own rank first
        who = rank if rank is not None else int(m_rank.group(1)) if m_rank else None
        work, progress, nccl2 = WORK.search(line), PROGRESS.search(line), NCCL2.search(line)
        m_group = GROUP.search(line)
        group, desc = (m_group[1], m_group[2]) if m_group else (None, None)
        if work and "Watchdog caught" in line:
            out.append(WatchdogTimeout(who, "nccl", int(work[1]), work[2].lower(), _int(work[3]), _int(work[4]),
                                       group=group, group_desc=desc))
        elif progress:
            seq, enq, done = (int(g) for g in progress.groups())
            last = out[-1] if out and out[-1].rank == who and out[-1].backend == "nccl" else None
            if last is not None and (last.seq != seq or None not in (last.group, group) and last.group != group):
                last = None  # another work's, or another group's: not the WorkNCCL line above
            base = last or WatchdogTimeout(who, "nccl", seq)
            merged = WatchdogTimeout(base.rank, "nccl", base.seq if base.seq is not None else seq, base.op,
                                     base.timeout_ms, base.ran_ms, enq, done, group or base.group,
                                     desc or base.group_desc)
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
    """What the timeouts of one process group say of its ranks: ``behind`` never enqueued the work the others
    timed out in, by its own line (named); ``likely`` wrote no timeout line at all (a rank's silence is no proof:
    its log may be cut, it may have died first; only the likely one, not named); ``timed_out`` the ranks whose
    watchdog fired in it, ``seq`` that work, ``group`` its GUID (None: the lines name none); ``aborted_itself``:
    the job ended on its own NCCL timeout (not stopped from outside)."""
    seq: int | None
    behind: tuple[int, ...]
    timed_out: tuple[int, ...]
    aborted_itself: bool
    likely: tuple[int, ...] = ()
    group: str | None = None


def behind(timeouts: dict[int, list[WatchdogTimeout]], world: list[int]) -> Behind | None:
    """From every rank's timeouts (rank -> parse(its log)) and the job's ranks: per process group (a SeqNum is one
    group's), the work the most of its ranks timed out in (of equally many, the furthest), and the ranks behind
    it by their own lines: a last enqueued work below it, or a timeout in an earlier work that it never enqueued
    past. A rank of the job with no timeout line at all is only the ``likely`` one, and only for the default
    group (the one every rank is in), when every timeout there has sequence numbers. The group reported: one
    that names a rank, else the one most ranks timed out in. nccl2's lines carry no numbers: only
    ``timed_out`` and ``aborted_itself`` are said, as for lines that name no group. None: no timeout."""
    groups: dict = {}
    for r, ts in timeouts.items():
        for t in ts:  # each rank's last timeout in each group
            groups.setdefault(_group_key(t), {})[r] = t
    if not groups:
        return None
    found = [_one_group(key, last, timeouts, world) for key, last in groups.items()]
    return max(found, key=lambda b: (bool(b.behind), bool(b.likely), len(b.timed_out) + len(b.behind),
                                     b.group in DEFAULT_GROUPS))


def _group_key(t: WatchdogTimeout) -> str | None:
    """The group a timeout is compared within: its GUID; None: the lines name none (nothing is compared)."""
    return t.group


def _one_group(key, last: dict[int, WatchdogTimeout], timeouts: dict, world: list[int]) -> Behind:
    seqs = [t.seq for t in last.values() if t.seq is not None]
    seq = max(set(seqs), key=lambda s: (seqs.count(s), s)) if seqs else None  # a tie: the furthest work
    named: set[int] = set()
    likely: set[int] = set()
    group = key
    if seq is not None and group is not None:
        named |= {r for r, t in last.items() if t.enqueued is not None and t.enqueued < seq}
        named |= {r for r, t in last.items() if t.seq is not None and t.seq < seq
                  and (t.enqueued is None or t.enqueued < seq)}
        default = any(t.group in DEFAULT_GROUPS or t.group_desc in DEFAULT_GROUPS for t in last.values())
        if default and all(t.seq is not None for t in last.values()):
            likely = {r for r in world if not timeouts.get(r)}
    timed_out = tuple(sorted(r for r in last if r not in named))
    return Behind(seq, tuple(sorted(named)), timed_out, aborted_itself=True, likely=tuple(sorted(likely)),
                  group=group)
