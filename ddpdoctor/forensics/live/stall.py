"""What counts as progress for the hang watchdog and when silence becomes a hang: the ranks' logged steps, the
newest progress file, the ranks behind the others, the threshold (fixed, or calibrated from the job)."""
from __future__ import annotations

import json
from pathlib import Path

from ..evidence import job_files
from ..judge import policy


COLLECTIVE_FRAMES = ("all_reduce", "allreduce", "barrier", "backward", "wait", "broadcast", "all_gather",
                     "reduce_scatter", "_engine_run_backward", "all_to_all", "recv", "send")


def last_steps(run_dir: Path) -> dict[int, int]:
    """Global rank -> last step it logged."""
    out = {}
    for path in (run_dir / "metrics").glob("rank*.jsonl"):
        try:
            lines = job_files.read_tail(path, 64 << 10).strip().splitlines()  # the last line is all it needs
            out[int(path.stem[4:])] = json.loads(lines[-1])["step"] if lines else 0
        except (OSError, ValueError, KeyError):
            continue
    return out


def progress_mark(run_dir: Path, logs: Path) -> float:
    """The newest modification time among the progress files: metrics, else the ranks' logs."""
    newest = 0.0
    for pattern in ((run_dir / "metrics").glob("rank*.jsonl"), logs.glob("*/attempt_*/*/std*.log")):
        for p in pattern:
            try:
                newest = max(newest, p.stat().st_mtime)
            except OSError:
                continue
    return newest


def behind(steps: dict[int, int], stacks: dict[int, str]) -> list[int]:
    """Ranks behind the others: a lower last step; or, all equal, the ranks not waiting inside a collective."""
    if steps and len(set(steps.values())) > 1:
        low = min(steps.values())
        return sorted(r for r, s in steps.items() if s == low)
    if stacks:
        outside = [r for r, text in stacks.items() if text and not any(f in text for f in COLLECTIVE_FRAMES)]
        if outside and len(outside) < len(stacks):
            return sorted(outside)
    return []


class Threshold:
    """When silence becomes a hang. Fixed (--hang-timeout), or calibrated from what the job has shown: a
    multiple of the longest gap between progress events after a warm-up, never under a floor (judge.policy), so
    a slow first step or an evaluation pause is no alarm. Calibrated, it is armed only once the job has made
    progress."""

    def __init__(self, fixed: float | None):
        self.fixed = fixed
        self.events = 0
        self.last: float | None = None
        self.longest_gap = 0.0

    def progressed(self, now: float) -> None:
        if self.last is not None and self.events > policy.HANG_WARMUP:
            self.longest_gap = max(self.longest_gap, now - self.last)
        self.events += 1
        self.last = now

    def value(self) -> float | None:
        if self.fixed is not None:
            return self.fixed
        if self.last is None:
            return None
        return policy.calibrated_s(self.longest_gap)

    def stalled(self, now: float, started: float) -> float:
        return now - max(self.last if self.last is not None else started, started)

    def fired(self, now: float, started: float) -> bool:
        limit = self.value()
        return limit is not None and self.stalled(now, started) > limit

    def source(self) -> policy.ThresholdSource:
        return policy.ThresholdSource.FIXED if self.fixed is not None else policy.ThresholdSource.CALIBRATED

    def describe(self) -> dict:
        if self.fixed is not None:
            return {"seconds": self.fixed, "source": self.source().value, "why": "set by --hang-timeout"}
        why = (f"{policy.HANG_FACTOR:g} x its longest pause between two collectives or steps after a warm-up of "
               f"{policy.HANG_WARMUP} ({self.longest_gap:.1f} s), and at least {policy.HANG_FLOOR_S:g} s")
        return {"seconds": round(self.value() or policy.HANG_FLOOR_S, 1), "source": self.source().value,
                "why": why}


def past_start_up(stacks: dict[int, str | None], ranks: list[int]) -> bool:
    """Start-up is over for the hang threshold although no rank has completed a collective yet: every rank's
    stack answered, at least one waits inside init_process_group (or its store), and none is still importing.
    A rank that then stays in its own code while the others wait there is stuck before init_process_group: its
    silence counts from now, not after the minute of start-up grace (issue 37: named 50-55 s after the fault with
    --hang-timeout 20)."""
    from ..evidence.model import WaitKind
    from ..evidence.stacks import main_thread, wait_of

    if not ranks or any(not stacks.get(r) for r in ranks):
        return False
    frames = {r: main_thread(stacks[r]) for r in ranks}
    if any(not fs or policy.importing(fs) for fs in frames.values()):
        return False
    return any(wait_of(fs).kind in (WaitKind.INIT, WaitKind.STORE)
               and any(f.function == "init_process_group" for f in fs) for fs in frames.values())


# A job whose ranks only send and receive (a pipeline: gloo's flight recorder records no send/recv, so its
# record shows no progress at all): its motion is read from the ranks' stacks and CPU time instead.
def motion(stacks: dict[int, str | None], cpu_s: dict[int, float], before: dict[int, float] | None = None) -> tuple:
    """What changes while a send/recv-only job moves: (where each waiting rank waits (its frames, lines included)
    and which ranks wait, whether the waiting ranks worked since ``before``, the previous sample's CPU times). A rank
    in its own code counts as "own" whatever its line (a rank spinning or sleeping there is no progress of the job).
    Worked: the waiting ranks' CPU time grew by policy.CPU_MOVES_S per rank since the previous sample (a healthy
    pipeline's ranks compute between their waits, and a sampled stack may land on the same line twice; a stuck
    rank's own CPU is not counted). Between two samples, not in total: a rank blocked in recv still spends a few ms a
    second (gloo's threads, the worker server answering these very polls: 3 ms/s a rank, measured), and a total
    counted in steps crossed one every 15-30 s, each crossing read as progress that restarted the silence."""
    from ..evidence.model import WaitKind
    from ..evidence.stacks import main_thread, wait_of

    where, waiting = [], []
    for rank in sorted(stacks):
        frames = main_thread(stacks[rank])
        kind = wait_of(frames).kind if frames else WaitKind.UNKNOWN
        own = kind in (WaitKind.NONE, WaitKind.UNKNOWN)
        where.append((rank, "own" if own else tuple((f.file, f.line, f.function) for f in frames)))
        if not own:
            waiting.append(rank)
    before = before or {}
    grown = sum(cpu_s[r] - before[r] for r in waiting if r in cpu_s and r in before)
    return tuple(where), grown >= policy.CPU_MOVES_S * max(1, len(waiting))


class SendRecvMotion:
    """A send/recv-only job's motion poll after poll (``motion``): the previous poll's CPU times, and a count of the
    polls whose waiting ranks worked, so that each such poll is a change of the watchdog's progress mark."""

    def __init__(self) -> None:
        self.cpu: dict[int, float] = {}
        self.worked = 0
        self.last: tuple | None = None

    def read(self, stacks: dict[int, str | None], cpu_s: dict[int, float]) -> tuple[tuple, bool]:
        """(the motion now, whether it changed since the previous poll)."""
        where, worked = motion(stacks, cpu_s, self.cpu)
        self.cpu, self.worked = cpu_s, self.worked + worked
        moved, before, self.last = (where, self.worked), self.last, (where, self.worked)
        return moved, moved != before


def own_code(stacks: dict[int, str | None]) -> dict[int, bool]:
    """Per rank whose stack answered: it stands in its own code (not in a wait)."""
    from ..evidence.model import WaitKind
    from ..evidence.stacks import main_thread, wait_of

    return {r: wait_of(main_thread(text)).kind == WaitKind.NONE for r, text in stacks.items() if text}


def stack_waits(stacks: dict[int, str | None]) -> bool:
    """Some rank's stack stands in a send/recv (a library's P2POp batch included): a job that only sends and
    receives, past its start-up (init_process_group's and new_group's store waits are start-up)."""
    from ..evidence.model import P2P_WAITS
    from ..evidence.stacks import main_thread, wait_of

    return any(wait_of(main_thread(text)).kind in P2P_WAITS
               for text in stacks.values() if text)



def in_init(sockets: str, run_dir: Path, procs: list) -> bool:
    """Some rank of ``procs`` waits inside init_process_group and none is importing (past_start_up)."""
    from ..evidence.procs import askable, rank_per_process

    ranks = askable(run_dir, procs, rank_per_process(procs))
    return past_start_up(stacks_of(sockets, ranks), ranks)


def p2p_waiting(sockets: str, run_dir: Path, procs: list) -> bool:
    """A rank's stack stands in a send/recv while the records show nothing pending: the job is past its start-up.
    gloo records a pipeline's all_reduces but not its send/recv, so after its first steps the records fall silent
    with nothing pending, as a start-up's do (torch 2.15 and 2.13 alike, whenever the watchdog armed after the
    last all_reduce before the stall): only the stacks tell a rank waiting in recv from a rank importing."""
    from ..evidence.procs import askable, rank_per_process

    return stack_waits(stacks_of(sockets, askable(run_dir, procs, rank_per_process(procs))))


def stacks_of(sockets: str, ranks: list[int]) -> dict[int, str | None]:
    """Each rank's stacks from its worker server (faulthandler's text), None where it did not answer; asked of
    every rank at once (a rank whose server cannot take the GIL costs its 2 s once, not once per rank)."""
    from ..evidence import worker_client

    return of_every_rank(sockets, ranks, lambda path: worker_client.ask(path, "dump_traceback", timeout=2.0))


def of_every_rank(sockets: str, ranks: list[int], ask) -> dict:
    """``ask(the rank's worker socket)`` of every rank at once, by rank."""
    from concurrent.futures import ThreadPoolExecutor

    if not ranks:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(ranks)), thread_name_prefix="ddpdoctor-ask") as pool:
        asked = {r: pool.submit(ask, sockets.replace("{rank}", str(r))) for r in ranks}
        return {r: f.result() for r, f in asked.items()}


def cpu_seconds(procs: list, running: list[int | None]) -> dict[int, float]:
    """Each rank's CPU time so far (user + system), for the ranks whose process still answers."""
    import psutil

    out = {}
    for proc, rank in zip(procs, running):
        try:
            if rank is not None:
                t = proc.cpu_times()
                out[rank] = t.user + t.system
        except psutil.Error:
            continue
    return out


def family_counters(proc, tcp: dict[int, int]) -> tuple[dict[int, float], dict[int, float], int | None, dict]:
    """One walk of a rank's descendants: the CPU seconds of its helpers (not Python: a compiler, ninja) and of
    every descendant (a Python subprocess the rank waits for does its work: policy.children_worked), by pid, the
    bytes the rank and its descendants read and wrote (a DataLoader's workers read for it; None: unreadable), and
    their TCP sockets' bytes by inode, from ``tcp`` (one reading of the ranks' network namespaces:
    tcp_bytes.socket_bytes_for)."""
    import psutil

    from ..evidence.procs import bytes_moved, runs_python
    from ..evidence.tcp_bytes import held_by

    try:
        children = proc.children(recursive=True)
    except psutil.Error:
        children = []
    helpers, every = {}, {}
    for child in children:
        try:
            t = child.cpu_times()
            every[child.pid] = t.user + t.system
            if not runs_python(child):
                helpers[child.pid] = every[child.pid]
        except psutil.Error:
            continue
    family = [proc, *children]
    return helpers, every, bytes_moved(family), held_by([p.pid for p in family], tcp)


def movement_samples(sockets: str | None, askable_ranks: list[int], procs: list, running: list[int | None],
                     counters_first: bool = False) -> dict:
    """Each rank's movement sample now (judge.policy.Sample): its stack from its worker server (the ranks that may
    be asked) and what it waits in, its own CPU seconds, its helpers' by pid, the bytes it read and wrote, through
    files and TCP sockets. A stack dump costs the rank its size in bytes and a little CPU: the first sample of a
    window reads the counters after the stacks, the second (``counters_first``) before them, so the window holds
    neither dump."""
    from ..evidence.stacks import main_thread, wait_of
    from ..evidence.tcp_bytes import socket_bytes_for

    def counters() -> tuple[dict, list]:
        tcp = socket_bytes_for([p.pid for p, r in zip(procs, running) if r is not None])
        return cpu_seconds(procs, running), [family_counters(p, tcp) if r is not None else None
                                             for p, r in zip(procs, running)]

    early = counters() if counters_first else None
    stacks = stacks_of(sockets, askable_ranks) if sockets else {}
    own, families = early or counters()
    out = {}
    for rank, family in zip(running, families):
        if rank is None:
            continue
        helpers, every, io, tcp = family
        frames = main_thread(stacks.get(rank))
        out[rank] = policy.Sample(frames, own.get(rank), helpers, wait_of(frames) if frames else None, io, every,
                                  tcp)
    return out


def movement(sockets: str | None, run_dir: Path, procs: list, wait) -> tuple[policy.Reading, dict]:
    """The job's motion over policy.MOVEMENT_WINDOW_S (judge.policy: computing, waiting on a busy rank, moved,
    or hung), asked only when the threshold fires, with the samples it was read from (rank -> the later one).
    ``wait``: how to sleep (the watchdog's stop event: a stop ends the wait)."""
    from ..evidence.procs import askable, rank_per_process

    running = rank_per_process(procs)
    ask = askable(run_dir, procs, running)
    done = collectives_done(sockets, ask)
    before = movement_samples(sockets, ask, procs, running)
    wait(policy.MOVEMENT_WINDOW_S)
    after = movement_samples(sockets, ask, procs, running, counters_first=True)
    return policy.reading_of(before, after, progressed_between(done, collectives_done(sockets, ask))), after


def collectives_done(sockets: str | None, ranks: list[int]) -> dict[int, int | None]:
    """Each rank's collectives completed so far, from its flight record (worker_client.completed: None before its
    first one, while init_process_group runs), for the ranks whose worker server answered."""
    from ..evidence import worker_client

    if not sockets:
        return {}
    records = of_every_rank(sockets, ranks, lambda path: worker_client.flight_record(path, timeout=2.0))
    return {r: worker_client.completed(fr) for r, fr in records.items() if fr is not None}


def progressed_between(before: dict[int, int | None], after: dict[int, int | None]) -> bool:
    """A rank completed a collective between two readings, or its first process group came up (its
    init_process_group ended). Seen under load with --hang-timeout 5: the threshold fired while node 0's ranks
    waited in init_process_group for node 1's, still importing torch; during the window they met and completed
    nine collectives, but both samples found them in a wait, and the job was stopped as hung."""
    return any(r in after and after[r] != n for r, n in before.items())
