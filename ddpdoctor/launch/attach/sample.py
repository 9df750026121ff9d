"""Reading every rank of a job from outside: py-spy dumps of all ranks in parallel, each with its time limit,
taken a few times over a few seconds to tell a stuck rank from a slow one (its stack, locals included, moved or not),
with each rank's flight record where one can be had (run-trainer's worker server, or torch's own dump pipe when
the job set it up). No signal is sent; the only write is a dump request into torch's pipe (dump_pipe.py)."""
from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..evidence import pyspy
from ..evidence.model import RankState, WaitKind, user_frame
from . import dump_pipe, job_access
from .discover import Job, RankProcess


@dataclass
class RankRead:
    """One rank as attach read it: its evidence record (py-spy's), whether it moved between the samples, or why
    it could not be read."""
    rank: int
    pid: int
    host: str
    local_rank: int | None
    state: RankState | None = None
    moved: bool | None = None
    failure: pyspy.DumpFailure | None = None
    error: str = ""
    recorded: RankState | None = None  # the flight recorder's record (run-trainer's worker server), where one answered

    @property
    def readable(self) -> bool:
        return self.state is not None

    @property
    def waits(self) -> bool:
        return self.state is not None and self.state.wait is not None and \
            self.state.wait.kind not in (WaitKind.NONE, WaitKind.UNKNOWN)

    def to_json(self) -> dict:
        s = self.state
        frame = user_frame(s.frames) if s else None
        wait = s.wait if s else None
        return {"rank": self.rank, "pid": self.pid, "host": self.host, "local_rank": self.local_rank,
                "wait": None if wait is None else {"kind": wait.kind.value, "peer": wait.peer,
                                                   "op": wait.call.op if wait.call else None},
                "where": frame.where if frame else None, "function": frame.function if frame else None,
                "moved": self.moved, "failure": self.failure.value if self.failure else None, "error": self.error,
                "stack": [f"{f.function} ({f.where})" for f in s.frames[:40]] if s else None}


def dump_all(ranks: list[RankProcess], tool: str | None, timeout: float,
             with_records: bool = True) -> dict[int, tuple[pyspy.Dump, dict | None]]:
    """One py-spy dump per rank and (``with_records``), where run-trainer's worker server listens or torch's dump
    pipe is open, its flight record; all at once (a thread each, each bounded by ``timeout``)."""
    if not ranks:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, 2 * len(ranks))) as pool:
        dumps = {rp.pid: pool.submit(pyspy.dump, rp.pid, tool, timeout) for rp in ranks}
        records = {} if not with_records else {  # asked with the job's rights, of the rank's own (job_access)
            rp.pid: pool.submit(job_access.worker_record, rp, timeout) for rp in ranks if rp.worker_socket}
        records.update({rp.pid: pool.submit(dump_pipe.flight_record, rp, timeout) for rp in ranks
                        if with_records and rp.dump_pipe and rp.pid not in records})
        return {pid: (f.result(), records[pid].result() if pid in records else None) for pid, f in dumps.items()}


SAMPLES = 4  # stack rounds over the interval: a healthy loop seen at the same line (and the same Work address)
#            in two rounds was judged stuck; in four it rarely is, and a stuck rank is the same in all of them


def read_job(job: Job, *, interval: float = 3.0, timeout: float = pyspy.TIMEOUT_S, tool: str | None = None,
             host: str | None = None, samples: int = SAMPLES) -> list[RankRead]:
    """Every rank of ``job`` on this node, its stack sampled ``samples`` times over ``interval`` seconds (once when
    ``interval`` is 0); its flight record read in the first and the last round (sequence ids only grow)."""
    host = host or socket.gethostname()
    tool = tool or pyspy.binary()
    for rp in job.ranks:
        for why in rp.unused:
            job_access.note(rp.rank, why)
    rounds = [dump_all(job.ranks, tool, timeout)]
    if interval > 0 and any(d.failure is None for d, _ in rounds[0].values()):
        start, steps = time.monotonic(), max(1, samples - 1)
        for k in range(1, steps + 1):
            time.sleep(max(0.0, start + interval * k / steps - time.monotonic()))
            rounds.append(dump_all(job.ranks, tool, timeout, with_records=k == steps))
    out = []
    for rp in job.ranks:
        taken = [r.get(rp.pid, (None, None)) for r in rounds]
        read = read_rank(rp, [d for d, _ in taken], host)
        add_record(read, taken[0][1], taken[-1][1], live_source(rp))
        out.append(read)
    return out


def live_source(rp: RankProcess):
    from ..evidence.model import Source

    return Source.WORKER_SERVER if rp.worker_socket else Source.FLIGHT_RECORDER


def add_record(read: RankRead, first: dict | None, second: dict | None, source=None) -> None:
    """The flight record (the later sample's) as the rank's record; a sequence id that moved is progress."""
    fr = second if second is not None else first
    if fr is None:
        return
    from ..evidence import flight_recorder
    from ..evidence.model import Source

    read.recorded = flight_recorder.rank_state(read.rank, fr, source or Source.WORKER_SERVER, live=True)
    if first is not None and second is not None and first is not second:
        # The record's sequence ids say whether the rank's collectives moved; its Python stack may move while
        # they do not (NCCL returns at once: the rank polls, logs or spins in its own loop around a stuck one).
        read.moved = _last_seqs(first) != _last_seqs(second)


def _last_seqs(fr: dict) -> dict:
    status = fr.get("pg_status") if isinstance(fr, dict) else None
    return {k: (v.get("last_enqueued_collective"), v.get("last_completed_collective"))
            for k, v in (status or {}).items() if isinstance(v, dict)}


def read_rank(rp: RankProcess, dumps: list[pyspy.Dump | None], host: str) -> RankRead:
    """The rank as its last readable dump shows it; moved when any two successive readable dumps differ (or it
    ended after one)."""
    read = RankRead(rp.rank, rp.pid, host, rp.local_rank)
    good = [d for d in dumps if d is not None and d.failure is None]
    if not good:
        bad = next((d for d in reversed(dumps) if d is not None), None) or pyspy.Dump(
            rp.pid, failure=pyspy.DumpFailure.OTHER, error="not read")
        read.failure, read.error = bad.failure, bad.error
        return read
    read.state = pyspy.to_state(good[-1], rp.rank, host=host, local_rank=rp.local_rank)
    first = next(i for i, d in enumerate(dumps) if d is not None and d.failure is None)
    if any(d is not None and d.failure is pyspy.DumpFailure.GONE for d in dumps[first:]):
        read.moved = True  # it ended between the samples: the job changed
    elif len({id(d) for d in good}) > 1:
        read.moved = len({pyspy.signature(d.main_thread()) for d in good}) > 1
    return read
