"""Reading every rank of a job from outside: py-spy dumps of all ranks in parallel, each with its time limit,
taken in rounds over a few seconds to tell a stuck rank from a slow one (its stack, locals included, moved or not;
the CPU time it used between the rounds), with each rank's flight record where one can be had (run-trainer's worker
server, or torch's own dump pipe when the job set it up). A watch goes on in more rounds where the first window
cannot tell a long step from a hang. No signal is sent; the only write is a dump request into torch's pipe
(dump_pipe.py)."""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import psutil

from ..evidence import procs
from ..evidence import pyspy, tcp_bytes
from ..evidence.model import RankState, WaitKind, user_frame
from . import dump_pipe, job_access
from .discover import Job, RankProcess


@dataclass
class RankRead:
    """One rank as attach read it: its evidence record (py-spy's), whether it moved between the samples (and
    whether it stood in a wait in one of them), the CPU it used, or why it could not be read."""
    rank: int
    pid: int
    host: str
    local_rank: int | None
    state: RankState | None = None
    moved: bool | None = None
    failure: pyspy.DumpFailure | None = None
    error: str = ""
    recorded: RankState | None = None  # the flight recorder's record (run-trainer's worker server), where one answered
    waited: bool = False  # in some round its stack stood in a wait (or its flight record says it moved through one)
    cpu: float | None = None  # the share of one core it and its children used over the last window (None: unknown)
    io: float | None = None  # the bytes per second it and its children read and wrote over it (None: unknown)

    @property
    def readable(self) -> bool:
        return self.state is not None

    @property
    def waits(self) -> bool:
        return self.state is not None and is_wait(self.state)

    @property
    def progressed(self) -> bool:
        """It moved through a wait: seen waiting in one round and elsewhere in another (or its flight record's
        sequence ids moved). A rank that only computes in its own code moves without the job progressing."""
        return bool(self.moved) and (self.waited or self.waits)

    def to_json(self) -> dict:
        s = self.state
        frame = user_frame(s.frames) if s else None
        wait = s.wait if s else None
        return {"rank": self.rank, "pid": self.pid, "host": self.host, "local_rank": self.local_rank,
                "wait": None if wait is None else {
                    "kind": wait.kind.value, "peer": wait.peer, "op": wait.call.op if wait.call else None,
                    "library": wait.library.library if wait.library else None,
                    "phrase": wait.library.phrase if wait.library else None,
                    "certain": wait.library.certain if wait.library else None},
                "where": frame.where if frame else None, "function": frame.function if frame else None,
                "moved": self.moved, "cpu": None if self.cpu is None else round(self.cpu, 2),
                "io_bytes_s": None if self.io is None else round(self.io),
                "failure": self.failure.value if self.failure else None, "error": self.error,
                "native": bool(s and s.raw.get("native")),
                "stack": [f"{f.function} ({f.where})" for f in s.frames[:96]] if s else None}


def is_wait(state: RankState) -> bool:
    return state.wait is not None and state.wait.kind not in (WaitKind.NONE, WaitKind.UNKNOWN)


def dump_all(ranks: list[RankProcess], tool: str | None, timeout: float,
             with_records: bool = True, dump: Callable[..., pyspy.Dump] = pyspy.dump
             ) -> dict[int, tuple[pyspy.Dump, dict | None]]:
    """One py-spy dump per rank and (``with_records``), where run-trainer's worker server listens or torch's dump
    pipe is open, its flight record; all at once (a thread each, each bounded by ``timeout``)."""
    if not ranks:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, 2 * len(ranks))) as pool:
        dumps = {rp.pid: pool.submit(dump, rp.pid, tool, timeout) for rp in ranks}
        records = {} if not with_records else {  # asked with the job's rights, of the rank's own (job_access)
            rp.pid: pool.submit(job_access.worker_record, rp, timeout) for rp in ranks if rp.worker_socket}
        records.update({rp.pid: pool.submit(dump_pipe.flight_record, rp, timeout) for rp in ranks
                        if with_records and rp.dump_pipe and rp.pid not in records})
        return {pid: (f.result(), records[pid].result() if pid in records else None) for pid, f in dumps.items()}


def cpu_seconds(pid: int, family: list[psutil.Process] | None = None) -> dict[int, float] | None:
    """CPU seconds (user + system, every thread) a rank and each of its descendants (a DataLoader's workers do
    its work) used so far, by pid; None when /proc does not say (the process ended, another user's).
    ``family``: the rank and its descendants as just listed (procs.family), else listed here."""
    family = procs.family(pid) if family is None else family
    if not family:
        return None
    out = {}
    for p in family:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = t.user + t.system
    return out if pid in out else None


def cpu_share(before: tuple[float, dict | None], after: tuple[float, dict | None]) -> float | None:
    """The share of one core used between two readings (processes in both; one that ended or started between
    them is left out rather than counted as a jump)."""
    (t0, a), (t1, b) = before, after
    if a is None or b is None or t1 <= t0:
        return None
    return sum(max(0.0, b[pid] - a[pid]) for pid in b if pid in a) / (t1 - t0)


SAMPLES = 4  # stack rounds over the interval: a healthy loop seen at the same line (and the same Work address)
#            in two rounds was judged stuck; in four it rarely is, and a stuck rank is the same in all of them


@dataclass
class Round:
    at: float  # time.monotonic() when it was taken
    dumps: dict[int, tuple[pyspy.Dump, dict | None]]
    cpu: dict[int, dict[int, float] | None]
    io: dict[int, int | None] = field(default_factory=dict)
    piped: frozenset[int] = frozenset()  # ranks asked for a dump through torch's pipe: they write it after this round
    tcp: dict[int, dict[int, int]] = field(default_factory=dict)  # pid -> its family's TCP sockets: inode -> bytes


NATIVE_AT_ONCE = 8  # native dumps run together: each reads libtorch's symbols (~0.5 s of CPU, ~300 MB)
NATIVE_MAX = 32     # ranks read with native frames in one attach; the others keep their Python frames


def wants_native(dump: pyspy.Dump) -> bool:
    """Where Python frames stop short of saying what the rank waits in: its innermost frame a library's and no wait
    certain from them (inside loss.backward(): DDP's Reducer, or the backward's own compute), or blocked (py-spy's
    "idle") in its own code (a Work.wait(), a lock, a sleep). Native frames say which."""
    thread = dump.main_thread()
    if dump.failure is not None or thread is None or not thread.frames:
        return False
    state = pyspy.to_state(dump, 0)
    if not is_wait(state):
        return state.frames[0].library or thread.state == "idle"
    return state.wait.library is not None and not state.wait.library.certain


class Sampler:
    """Rounds of every rank's stack and CPU time, kept in order, so a watch goes on where the first window ended;
    native frames read once, beside the rounds, for the ranks whose Python frames stop short (``wants_native``)."""

    def __init__(self, job: Job, tool: str | None, timeout: float, host: str,
                 progress: Callable[[str], None] | None = None, native: bool = True):
        self.job, self.tool, self.timeout, self.host = job, tool, timeout, host
        self.rounds: list[Round] = []
        self.progress = progress or (lambda text: None)
        self.start = time.monotonic()
        self.native = native
        self.natives: dict[int, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        # one py-spy at a time per rank: a process has one ptrace tracer, a second py-spy fails ("Failed to get
        # stack traces", seen when a round met a native read of the same rank)
        self._locks = {rp.pid: threading.Lock() for rp in job.ranks}
        self._threads = {rp.pid: rp.thread for rp in job.ranks}  # a launcher that trains in a thread of its own

    def dump(self, pid: int, tool: str | None, timeout: float, native: bool = False) -> pyspy.Dump:
        with self._locks[pid]:
            taken = pyspy.dump(pid, tool, timeout, native)
        taken.thread = self._threads.get(pid)
        return taken

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def start_native(self, taken: Round) -> None:
        """Native dumps of the ranks this round shows stopping short, in the background while the rounds go on."""
        if not self.native:
            return
        todo = [pid for pid, (d, _) in taken.dumps.items() if pid not in self.natives and wants_native(d)]
        todo = todo[:max(0, NATIVE_MAX - len(self.natives))]
        if not todo:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=NATIVE_AT_ONCE)
        for pid in todo:
            self.natives[pid] = self._pool.submit(self.dump, pid, self.tool, self.timeout, True)

    def native_of(self, pid: int, last: pyspy.Dump | None) -> pyspy.Dump | None:
        """The rank's native dump, when it shows the same Python frames as its latest round (else it moved since:
        the rounds say so, and its native frames are not where it stands)."""
        future = self.natives.get(pid)
        if future is None or last is None or last.failure is not None:
            return None
        native = future.result()  # bounded by py-spy's own timeout
        if native.failure is not None:
            return None
        same = pyspy.python_frames(native.main_thread()) == pyspy.python_frames(last.main_thread())
        return native if same else None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def take(self, with_records: bool) -> Round:
        at = time.monotonic()
        families = {rp.pid: procs.family(rp.pid) for rp in self.job.ranks}
        cpu = {pid: cpu_seconds(pid, family) for pid, family in families.items()}
        io = {pid: procs.bytes_moved(family) for pid, family in families.items()}  # before this round's requests
        sockets = tcp_bytes.socket_bytes_for(rp.pid for rp in self.job.ranks)
        tcp = {pid: tcp_bytes.held_by([p.pid for p in family], sockets) for pid, family in families.items()}
        piped = frozenset(rp.pid for rp in self.job.ranks if with_records and rp.dump_pipe and not rp.worker_socket)
        taken = Round(at, dump_all(self.job.ranks, self.tool, self.timeout, with_records, self.dump), cpu, io, piped,
                      tcp)
        self.rounds.append(taken)
        return taken

    def readable(self) -> bool:
        return any(d.failure is None for r in self.rounds for d, _ in r.dumps.values())

    def window(self, interval: float, samples: int = SAMPLES) -> None:
        """``samples`` rounds spread over ``interval`` seconds (one when ``interval`` is 0, or when nothing could
        be read in the first); flight records in the first and the last."""
        n = len(self.job.ranks)
        self.progress(f"reading {n} rank(s) with py-spy: round 1/{samples if interval > 0 else 1}")
        self.start_native(self.take(with_records=True))
        if interval <= 0 or not self.readable():
            return
        begin, steps = time.monotonic(), max(1, samples - 1)
        for k in range(1, steps + 1):
            time.sleep(max(0.0, begin + interval * k / steps - time.monotonic()))
            self.progress(f"reading {n} rank(s) with py-spy: round {k + 1}/{steps + 1}")
            self.take(with_records=k == steps)

    def reads(self, window: float) -> list[RankRead]:
        """Every rank as all rounds show it; its CPU share over the last ``window`` seconds; its flight record
        from the first and the latest round that read one."""
        out = []
        if any(not f.done() for f in self.natives.values()):
            self.progress(f"reading native frames of {len(self.natives)} rank(s) (where Python frames stop)")
        for rp in self.job.ranks:
            taken = [r.dumps.get(rp.pid, (None, None)) for r in self.rounds]
            read = read_rank(rp, [d for d, _ in taken], self.host,
                             self.native_of(rp.pid, taken[-1][0] if taken else None))
            records = [fr for _, fr in taken if fr is not None]
            if records:
                add_record(read, records[0], records[-1], live_source(rp))
            read.cpu = self.cpu_of(rp.pid, window)
            read.io = self.io_of(rp.pid, window)
            out.append(read)
        return out

    def cpu_of(self, pid: int, window: float) -> float | None:
        """The CPU share between the latest round and the earliest one at most ``window`` seconds before it."""
        if len(self.rounds) < 2:
            return None
        last = self.rounds[-1]
        first = self._first_of_window(last, window)
        return cpu_share((first.at, first.cpu.get(pid)), (last.at, last.cpu.get(pid)))

    def io_of(self, pid: int, window: float) -> float | None:
        """Bytes per second read and written over the same window, through files and TCP sockets; None when
        unknown, or when the window holds a dump the rank wrote at attach's own request (torch's pipe): those bytes
        are attach's, not the job's."""
        if len(self.rounds) < 2:
            return None
        last = self.rounds[-1]
        first = self._first_of_window(last, window)
        inside = self.rounds[next(i for i, r in enumerate(self.rounds) if r is first):-1]
        a, b = first.io.get(pid), last.io.get(pid)
        if a is None or b is None or last.at <= first.at or any(pid in r.piped for r in inside):
            return None
        through_tcp = tcp_bytes.grown(first.tcp.get(pid, {}), last.tcp.get(pid, {}))
        return (max(0, b - a) + through_tcp) / (last.at - first.at)

    def _first_of_window(self, last: Round, window: float) -> Round:
        return next((r for r in self.rounds[:-1] if r.at >= last.at - window - 0.05), self.rounds[-2])


def read_job(job: Job, *, interval: float = 3.0, timeout: float = pyspy.TIMEOUT_S, tool: str | None = None,
             host: str | None = None, samples: int = SAMPLES, watch: float = 0.0,
             undecided: Callable[[list[RankRead]], str | None] | None = None,
             progress: Callable[[str], None] | None = None, native: bool = True) -> list[RankRead]:
    """Every rank of ``job`` on this node, its stack sampled ``samples`` times over ``interval`` seconds (once when
    ``interval`` is 0). While ``undecided(reads)`` says why the rounds cannot tell yet (nothing moved, but a rank
    computes: a long step or a hang), more rounds at the same pace, until ``watch`` seconds from the start."""
    for rp in job.ranks:
        for why in rp.unused:
            job_access.note(rp.rank, why)
    sampler = Sampler(job, tool or pyspy.binary(), timeout, host or socket.gethostname(), progress, native)
    try:
        sampler.window(interval, samples)
        reads = sampler.reads(interval)
        if interval <= 0 or undecided is None or not sampler.readable():
            return reads
        pace, k = interval / max(1, samples - 1), 0
        while (why := undecided(reads)) is not None and sampler.elapsed() + pace <= watch:
            k += 1
            sampler.progress(f"{why}: watching up to {watch:g} s (--wait), {sampler.elapsed():.0f} s so far")
            time.sleep(pace)
            sampler.start_native(sampler.take(with_records=k % max(1, samples - 1) == 0))
            reads = sampler.reads(interval)
        return reads
    finally:
        sampler.close()


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
        read.waited = read.waited or read.moved  # a collective completed: the rank went through one


def _last_seqs(fr: dict) -> dict:
    status = fr.get("pg_status") if isinstance(fr, dict) else None
    return {k: (v.get("last_enqueued_collective"), v.get("last_completed_collective"))
            for k, v in (status or {}).items() if isinstance(v, dict)}


def read_rank(rp: RankProcess, dumps: list[pyspy.Dump | None], host: str,
              native: pyspy.Dump | None = None) -> RankRead:
    """The rank as its last readable dump shows it (with its native frames, where a native dump of that same
    Python stack was had); moved when any two successive readable dumps differ (or it ended after one); waited
    when any readable dump stands in a wait."""
    read = RankRead(rp.rank, rp.pid, host, rp.local_rank)
    good = [d for d in dumps if d is not None and d.failure is None]
    if not good:
        bad = next((d for d in reversed(dumps) if d is not None), None) or pyspy.Dump(
            rp.pid, failure=pyspy.DumpFailure.OTHER, error="not read")
        read.failure, read.error = bad.failure, bad.error
        return read
    read.state = pyspy.to_state(native or good[-1], rp.rank, host=host, local_rank=rp.local_rank)
    read.state.raw["native"] = native is not None
    distinct = {pyspy.signature(d.main_thread()): d for d in good[:-1]}  # a still rank: one stack to read
    read.waited = is_wait(read.state) or any(is_wait(pyspy.to_state(d, rp.rank)) for d in distinct.values())
    first = next(i for i, d in enumerate(dumps) if d is not None and d.failure is None)
    if any(d is not None and d.failure is pyspy.DumpFailure.GONE for d in dumps[first:]):
        read.moved = read.waited = True  # it ended between the samples: the job changed
    elif len({id(d) for d in good}) > 1:
        read.moved = len({pyspy.signature(d.main_thread()) for d in good}) > 1
    return read
