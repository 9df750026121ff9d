"""Reading every rank of a job from outside: py-spy dumps of all ranks in parallel, each with its time limit,
taken twice a few seconds apart to tell a stuck rank from a slow one (its stack, locals included, moved or not).
Nothing is sent to the processes: no signal, no write."""
from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..evidence import pyspy
from ..evidence.model import RankState, WaitKind, user_frame
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


def dump_all(ranks: list[RankProcess], tool: str | None, timeout: float) -> dict[int, pyspy.Dump]:
    """One py-spy dump per rank, all at once (a thread each, each bounded by ``timeout``)."""
    if not ranks:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(ranks))) as pool:
        futures = {rp.pid: pool.submit(pyspy.dump, rp.pid, tool, timeout) for rp in ranks}
        return {pid: f.result() for pid, f in futures.items()}


def read_job(job: Job, *, interval: float = 3.0, timeout: float = pyspy.TIMEOUT_S, tool: str | None = None,
             host: str | None = None) -> list[RankRead]:
    """Every rank of ``job`` on this node, sampled twice ``interval`` seconds apart (once when ``interval`` is 0)."""
    host = host or socket.gethostname()
    tool = tool or pyspy.binary()
    first = dump_all(job.ranks, tool, timeout)
    second = first
    if interval > 0 and any(d.failure is None for d in first.values()):
        time.sleep(interval)
        second = dump_all(job.ranks, tool, timeout)
    return [read_rank(rp, first.get(rp.pid), second.get(rp.pid), host) for rp in job.ranks]


def read_rank(rp: RankProcess, first: pyspy.Dump | None, second: pyspy.Dump | None, host: str) -> RankRead:
    read = RankRead(rp.rank, rp.pid, host, rp.local_rank)
    last = second if second is not None and second.failure is None else first
    if last is None or last.failure is not None:
        bad = last or pyspy.Dump(rp.pid, failure=pyspy.DumpFailure.OTHER, error="not read")
        read.failure, read.error = bad.failure, bad.error
        return read
    read.state = pyspy.to_state(last, rp.rank, host=host, local_rank=rp.local_rank)
    if first is not None and first.failure is None and second is not None and second is not first:
        if second.failure is pyspy.DumpFailure.GONE:
            read.moved = True  # it ended between the samples: the job changed
        elif second.failure is None:
            read.moved = pyspy.signature(first.main_thread()) != pyspy.signature(second.main_thread())
    return read
