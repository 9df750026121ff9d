"""The one movement and threshold policy of the forensics: when a rank moved, whether a job computes, waits on a
busy rank or hangs, and every threshold those rules use. The live watchdog, attach and the post-mortem read it
from here, in every phase of a job (start-up, training, evaluation, checkpoint, shutdown).

The rule, per job (``job_motion``), from what each rank did between two samples (``activity``):
- no rank waits (in a collective, a barrier, a send/recv, the store, init_process_group, a device synchronize):
  the job is **computing**, never a hang, however long and whatever code it is in;
- some ranks wait while another **works in its own code** (its CPU time grows, its stack changes, it reads or
  writes: a download, a checkpoint written to slow storage, a data loader's workers reading; or it waits for a
  child process of its own that uses the CPU: an evaluation run as a subprocess): the job is
  **waiting on a busy rank**; said live, not stopped by the hang threshold, only past the busy bound (the
  process group's own timeout unless the user sets one);
- a rank does start-up work (an import, a compile, an op build, a checkpoint load) or a helper it started (a
  compiler, ninja) uses the CPU: the job **moved**;
- some rank waits and no rank moved (no collective progress, no CPU in its own code, no stack change, no helper
  working, no bytes read or written) for the hang threshold: a **hang**. A waiting rank that spins the CPU inside
  its wait (NCCL's host thread in cudaStreamSynchronize, ``.item()``, ``.cpu()``) counts as waiting, not as work.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..evidence.model import Frame, Wait, WaitKind
from ..evidence.tcp_bytes import grown

# --- what counts as work -------------------------------------------------------------------------------------
# CPU seconds between two samples that count as work: a rank blocked in a wait, a lock or a sleep uses ~0.
CPU_MOVES_S = 0.05
# Bytes a rank (with its children: a DataLoader's workers) read or wrote between two samples that count as work
# outside a wait: /proc/PID/io (evidence.procs.bytes_moved: files and pipes, and the storage layer's reads inside
# one long read()) and its TCP sockets' bytes sent and received (evidence.tcp_bytes: a recv() into memory moves
# no /proc/PID/io counter). Measured: 0 over 1.5 s for a rank asleep while run-trainer's watchdog polls its
# flight record; a stack dump costs its size (1.5 KB), and the samples are ordered to leave it out. A download at
# 50 KB/s or a checkpoint throttled by the page cache reaches it in the movement window.
IO_MOVES_BYTES = 64 * 1024
# A share of one core over a window (attach's rounds): above it a rank computes. Measured: 0.00 over 3 s for a
# gloo rank in DDP's Reducer wait and for one in time.sleep; a computing rank uses a core, a quarter of one when
# eight ranks share two cores.
BUSY_SHARE = 0.1
# Several nodes: another node's mark that its ranks still start and work (their CPU grows before their first
# collective, live/peers.PeerStart.note, written each poll) counts for this long: a few of its polls.
PEER_STARTING_FRESH_S = 5.0
# A stack standing in an import, or in a library's compile, build or load: start-up work.
IMPORTING = ("<frozen importlib._bootstrap", "importlib/__init__.py")
# A stack standing in a wait for its own child process (subprocess.run, multiprocessing, a process pool): the
# child's CPU, a Python one's too (an evaluation harness run as a subprocess), is the rank's work.
CHILD_WAITS = ("/subprocess.py", "/multiprocessing/", "/concurrent/futures/")
START_UP_WORK = ("torch/_inductor/", "torch/_dynamo/", "torch/utils/cpp_extension.py", "op_builder/",
                 "torch/serialization.py", "safetensors/", "triton/")

# --- when silence becomes a hang -----------------------------------------------------------------------------
# Calibrated: FACTOR x the longest gap between progress events after WARMUP events, never under FLOOR_S.
HANG_FLOOR_S = 30.0
HANG_FACTOR = 5.0
HANG_WARMUP = 5
# Start-up (and an exit in progress) keeps silence from counting for at most this long, or two fixed thresholds.
START_UP_GRACE_S = 60.0
# The window over which a fired threshold samples movement before it stops anything: long enough for a
# compiler's CPU to show, short beside any hang threshold.
MOVEMENT_WINDOW_S = 1.5
# A collective pending this long when a job was stopped from outside: its ranks had stopped moving (a healthy
# one completes in milliseconds; a slow link's largest all_reduce in seconds).
STALLED_S = 10.0
# attach: a wait this much longer than any step the flight record shows is overdue (a hang) even while every
# rank spins inside its wait; after MIN_GAPS gaps, never under the floor.
OVERDUE_FACTOR = HANG_FACTOR
OVERDUE_MIN_GAPS = HANG_WARMUP
OVERDUE_FLOOR_S = HANG_FLOOR_S


def grace_s(fixed_threshold: float | None) -> float:
    """How long start-up or an exit keeps silence from counting (then a rank stuck there is named)."""
    return max(START_UP_GRACE_S, 2 * (fixed_threshold or 0.0))


def calibrated_s(longest_gap_s: float) -> float:
    return max(HANG_FLOOR_S, HANG_FACTOR * longest_gap_s)


class ThresholdSource(str, Enum):
    """Which limit made silence a hang: data, never a flag's spelling."""
    FIXED = "--hang-timeout"
    CALIBRATED = "calibrated"
    PROCESS_GROUP = "process-group timeout"
    BUSY_BOUND = "--busy-timeout"


# --- one rank between two samples ----------------------------------------------------------------------------
class Activity(str, Enum):
    WAITING = "waiting"      # in a collective, a barrier, a send/recv, the store, init: it waits for others
    WORKING = "working"      # in its own code and its CPU grew or its stack changed: busy, not stuck
    STARTING = "starting"    # start-up work (an import, a compile, a build, a load) or a helper using the CPU
    IDLE = "idle"            # in its own code, nothing moved (asleep, blocked on something of its own)
    UNKNOWN = "unknown"      # nothing read


@dataclass
class Sample:
    """One rank at one moment: its main thread's frames (innermost first, empty: not read), what they wait in,
    its own CPU seconds, the CPU seconds of its helpers (descendants that are not Python) by pid, the bytes it
    and its descendants read and wrote so far (None: not readable), and their TCP sockets' bytes by inode."""
    frames: tuple[Frame, ...] = ()
    cpu_s: float | None = None
    helpers_cpu_s: dict[int, float] = field(default_factory=dict)
    wait: Wait | None = None
    io_bytes: int | None = None
    children_cpu_s: dict[int, float] = field(default_factory=dict)  # every descendant's, Python ones too
    socket_bytes: dict[int, int] = field(default_factory=dict)  # TCP socket inode -> bytes sent and received


def helpers_moved(before: Sample, after: Sample) -> bool:
    """A helper (a compiler, a build) used the CPU between the samples, or a new one started."""
    used = sum(max(0.0, t - before.helpers_cpu_s.get(pid, 0.0)) for pid, t in after.helpers_cpu_s.items())
    return used >= CPU_MOVES_S


def children_worked(before: Sample, after: Sample) -> bool:
    """The rank's main thread waits for a child process of its own and its children used the CPU."""
    if not any(any(p in f.file for p in CHILD_WAITS) for f in after.frames):
        return False
    used = sum(max(0.0, t - before.children_cpu_s.get(pid, 0.0)) for pid, t in after.children_cpu_s.items())
    return used >= CPU_MOVES_S


def start_up_work(frames: tuple[Frame, ...]) -> bool:
    """The stack stands in an import or in a library's compile, build or load."""
    return any(any(p in f.file for p in IMPORTING + START_UP_WORK) for f in frames)


def importing(frames: tuple[Frame, ...]) -> bool:
    return any(any(p in f.file for p in IMPORTING) for f in frames)


def cpu_used(before: Sample, after: Sample) -> float:
    if before.cpu_s is None or after.cpu_s is None:
        return 0.0
    return max(0.0, after.cpu_s - before.cpu_s)


def io_used(before: Sample, after: Sample) -> int:
    """Bytes read and written between the samples: files and pipes, and what went through its TCP sockets."""
    files = 0 if before.io_bytes is None or after.io_bytes is None else max(0, after.io_bytes - before.io_bytes)
    return files + grown(before.socket_bytes, after.socket_bytes)


def io_rate_works(bytes_per_s: float | None) -> bool:
    """Reading or writing at this rate over a longer window (attach's rounds) is work: the live rule's rate."""
    return bytes_per_s is not None and bytes_per_s * MOVEMENT_WINDOW_S >= IO_MOVES_BYTES


def waits(wait: Wait | None, busy: bool) -> bool:
    """It stands in a wait. A library's wait the frames do not prove (inside loss.backward(): DDP's Reducer, or
    the backward's own compute) is one only while the rank uses no CPU: using a core there, it computes. A wait
    torch's own frames show stays a wait whatever CPU the rank uses (a spin inside it is no work)."""
    if wait is None or wait.kind in (WaitKind.NONE, WaitKind.UNKNOWN):
        return False
    return wait.library is None or wait.library.certain or not busy


def activity(before: Sample, after: Sample) -> Activity:
    """What one rank did between two samples, by the rule above."""
    if helpers_moved(before, after):
        return Activity.STARTING
    working = cpu_used(before, after) >= CPU_MOVES_S
    reading_or_writing = io_used(before, after) >= IO_MOVES_BYTES  # a wait's transport bytes: still a wait
    if not after.frames:
        return Activity.WORKING if working or reading_or_writing else Activity.UNKNOWN
    if waits(after.wait, working):
        return Activity.WAITING
    if working and start_up_work(after.frames):
        return Activity.STARTING
    if working or reading_or_writing or children_worked(before, after) or \
            (before.frames and before.frames != after.frames):
        return Activity.WORKING
    return Activity.IDLE


# --- the job ---------------------------------------------------------------------------------------------------
class JobMotion(str, Enum):
    MOVED = "moved"                      # start-up work, a helper, or progress through a wait
    COMPUTING = "computing"              # no rank waits: never a hang
    WAITING_ON_BUSY = "waiting_on_busy"  # some wait while another works in its own code: not stopped by the threshold
    HUNG = "hung"                        # some rank waits and none moved
    UNKNOWN = "unknown"                  # no rank could be read


@dataclass(frozen=True)
class Reading:
    motion: JobMotion
    waiting: tuple[int, ...] = ()
    busy: tuple[int, ...] = ()
    starting: tuple[int, ...] = ()

    @property
    def stoppable(self) -> bool:
        """The hang threshold may stop the job: some rank waits and nothing moved."""
        return self.motion is JobMotion.HUNG


def job_motion(activities: dict[int, Activity], progressed: bool = False) -> Reading:
    """The job's motion from each rank's activity; ``progressed``: a collective completed (or a rank went through
    a wait) between the samples."""
    of = {a: tuple(sorted(r for r, v in activities.items() if v is a)) for a in Activity}
    waiting, busy, starting = of[Activity.WAITING], of[Activity.WORKING], of[Activity.STARTING]
    if progressed or starting:
        return Reading(JobMotion.MOVED, waiting, busy, starting)
    if not activities or len(of[Activity.UNKNOWN]) == len(activities):
        return Reading(JobMotion.UNKNOWN)
    if not waiting:
        return Reading(JobMotion.COMPUTING, waiting, busy)
    if busy:
        return Reading(JobMotion.WAITING_ON_BUSY, waiting, busy)
    return Reading(JobMotion.HUNG, waiting)


def through_a_wait(before: Sample, after: Sample) -> bool:
    """It moved through a wait: it stood in a wait in one sample and its stack is another in the other (out of
    init_process_group into DDP's broadcast, out of a barrier into its own code). attach's rounds use the same
    rule (attach.sample.RankRead.progressed). A rank blocked in one wait keeps its Python frames."""
    if not before.frames or not after.frames or before.frames == after.frames:
        return False
    return waits(before.wait, False) or waits(after.wait, False)


def reading_of(before: dict[int, Sample], after: dict[int, Sample], progressed: bool = False) -> Reading:
    """The job's motion between two rounds of samples (the ranks in both); ``progressed``: a collective completed
    between them (the flight records say), else a rank moved through a wait."""
    both = [r for r in before if r in after]
    progressed = progressed or any(through_a_wait(before[r], after[r]) for r in both)
    return job_motion({r: activity(before[r], after[r]) for r in both}, progressed)
