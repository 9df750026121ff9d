"""Reading every rank of a job from outside: py-spy dumps of all ranks in parallel, each with its time limit,
taken twice a few seconds apart to tell a stuck rank from a slow one (its stack, locals included, moved or not).
Nothing is sent to the processes: no signal, no write."""
from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..collectives import user_site
from ..evidence import pyspy
from .discover import Job, RankProcess


@dataclass
class RankRead:
    """One rank as attach read it: where it stands (the user's frame), what it waits in, whether it moved
    between the samples, or why it could not be read."""
    rank: int
    pid: int
    host: str
    local_rank: int | None
    wait: pyspy.Wait | None = None
    where: str | None = None
    function: str | None = None
    moved: bool | None = None
    failure: pyspy.DumpFailure | None = None
    error: str = ""
    stack: list[str] | None = None  # the main thread's frames, innermost first ("func (file:line)")

    @property
    def readable(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict:
        return {"rank": self.rank, "pid": self.pid, "host": self.host, "local_rank": self.local_rank,
                "wait": self.wait.to_json() if self.wait else None, "where": self.where, "function": self.function,
                "moved": self.moved, "failure": self.failure.value if self.failure else None, "error": self.error,
                "stack": self.stack}


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
    return [_read(rp, first.get(rp.pid), second.get(rp.pid), host) for rp in job.ranks]


def _read(rp: RankProcess, first: pyspy.Dump | None, second: pyspy.Dump | None, host: str) -> RankRead:
    read = RankRead(rp.rank, rp.pid, host, rp.local_rank)
    last = second if second is not None and second.failure is None else first
    if last is None or last.failure is not None:
        bad = last or pyspy.Dump(rp.pid, failure=pyspy.DumpFailure.OTHER, error="not read")
        read.failure, read.error = bad.failure, bad.error
        return read
    thread = last.main_thread()
    frames = thread.frames if thread else []
    read.wait = pyspy.wait_of(frames)
    site = user_site(pyspy.frames_tuples(thread))
    if site:
        read.where, read.function = site["where"], site["function"]
    read.stack = [f"{f.function} ({f.where})" for f in frames[:40]]
    if first is not None and first.failure is None and second is not None and second is not first:
        if second.failure is pyspy.DumpFailure.GONE:
            read.moved = True  # it ended between the samples: the job changed
        elif second.failure is None:
            read.moved = pyspy.signature(first.main_thread()) != pyspy.signature(thread)
    return read
