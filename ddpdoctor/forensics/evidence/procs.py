"""The job's processes: torchrun's workers and their ranks, their stacks read from outside (py-spy), and
stopping the agent so that nothing outlives the command (signal, grace period, SIGKILL, reap)."""
from __future__ import annotations

import os
import signal
import time

import psutil

from ...numbers import parse_int


def workers(agent_pid: int) -> list[psutil.Process]:
    """The agent's worker processes: its direct children (a rank's own children, DataLoader workers, carry
    the same RANK and must not stand in for it)."""
    try:
        return [c for c in psutil.Process(agent_pid).children() if runs_python(c)]
    except psutil.Error:
        return []


def _env_int(proc: psutil.Process, name: str) -> int | None:
    """An integer from a process's environment (numbers.parse_int: 'RANK=²' is no rank), None if unreadable."""
    try:
        return parse_int(proc.environ().get(name))
    except psutil.Error:
        return None


def rank_per_process(procs: list[psutil.Process]) -> list[int | None]:
    return [_env_int(p, "RANK") for p in procs]


def local_rank_of(proc: psutil.Process) -> int | None:
    return _env_int(proc, "LOCAL_RANK")


def failed_at(proc: psutil.Process) -> float | None:
    """When this process wrote its torch error file (it raised and is ending), None if it has not: the file
    torchrun named in its environment, newer than the process (an older one is an earlier attempt's)."""
    try:
        path = proc.environ().get("TORCHELASTIC_ERROR_FILE")
        written = os.stat(path).st_mtime if path else None
        return written if written is not None and written >= proc.create_time() else None
    except (psutil.Error, OSError):
        return None


def ranks_of(procs: list[psutil.Process]) -> list[int]:
    return sorted(r for r in rank_per_process(procs) if r is not None)


def signal_stacks(procs, stacks_dir) -> dict[int, str]:
    """Ranks whose worker server did not answer: py-spy from outside first (no signal: a job's own SIGUSR1 handler,
    Lightning's SLURM requeue among them, must not run at our request), then SIGUSR1 (the bootstrap's
    faulthandler) for the ranks py-spy could not read (no ptrace in a container)."""
    from . import job_files

    out = py_spy_stacks(procs)
    unread = [p for p in procs if _env_int(p, "RANK") not in out]
    if not unread:
        return out
    before = {p: p.stat().st_size for p in stacks_dir.glob("rank*.txt")} if stacks_dir.exists() else {}
    for p in unread:
        try:
            p.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    time.sleep(1.5)
    for path in sorted(stacks_dir.glob("rank*.txt")) if stacks_dir.exists() else []:
        text = job_files.read_text(path, job_files.STDERR_TAIL_BYTES)[before.get(path, 0):]
        if text.strip() and int(path.stem[4:]) not in out:
            out[int(path.stem[4:])] = text
    return out


def py_spy_stacks(procs) -> dict[int, str]:
    """User scripts have no faulthandler hook: py-spy (when installed) reads their stacks from outside, through
    the one py-spy runner (pyspy.dump), in faulthandler's layout."""
    from . import pyspy

    from concurrent.futures import ThreadPoolExecutor

    tool = pyspy.binary()
    ranked = [(rank, p) for p in procs if (rank := _env_int(p, "RANK")) is not None]
    if not tool or not ranked:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(ranked)), thread_name_prefix="ddpdoctor-py-spy") as pool:
        dumps = {rank: pool.submit(pyspy.dump, p.pid, tool=tool, timeout=20) for rank, p in ranked}  # at once
        texts = {rank: pyspy.as_faulthandler_text(f.result()) for rank, f in dumps.items()}
    return {rank: text for rank, text in texts.items() if text}


def family(pid: int) -> list[psutil.Process]:
    """A process and all its descendants, as they are now (torchrun's workers outlive it if it is killed)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def bytes_moved(processes: list[psutil.Process]) -> int | None:
    """The bytes these processes read and wrote so far, as /proc/PID/io counts them: through read()/write() (files,
    pipes; a socket's recv is not counted, evidence.tcp_bytes counts it) and at the storage layer (a block read in
    progress inside one long read() call). None when no process's counters could be read (gone, not ours)."""
    total, read = 0, False
    for p in processes:
        try:
            io = p.io_counters()
        except (psutil.Error, AttributeError):
            continue
        total += io.read_chars + io.write_chars + io.read_bytes + io.write_bytes
        read = True
    return total if read else None


def reap(procs: list[psutil.Process], grace: float) -> None:
    """Wait up to ``grace`` for the processes to end, then SIGKILL what is left."""
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)


def stop_agent(agent, grace: float = 10.0, sig: int | None = signal.SIGTERM,
               known: list[psutil.Process] | None = None) -> None:
    """Signal the agent (it stops its workers; ``sig=None``: it has the signal already); whatever is left after
    the grace period gets SIGKILL. The agent itself is waited for through its Popen only: a second waitpid
    here would reap it and leave the caller's Popen without its exit code."""
    import subprocess

    deadline = time.monotonic() + grace
    kids = (known or []) + family(agent.pid)[1:]
    if sig is not None:
        try:
            os.kill(agent.pid, sig)
        except ProcessLookupError:
            pass
    try:
        agent.wait(grace)
    except subprocess.TimeoutExpired:
        kids += family(agent.pid)[1:]
        agent.kill()
    reap(kids, max(0.0, deadline - time.monotonic()))


def record_at_exit(run_dir, rank: int):
    """Where the bootstrap writes the rank's flight record at its exit (DDPDOCTOR_FR_DIR, torchrun.environment)."""
    return run_dir / "flight_recorder" / f"rank{rank}.json"


def ended_here(run_dir, rank: int, proc: psutil.Process) -> bool:
    """This process has written its record at exit (the bootstrap's, when the script ended or raised): it is
    ending. Its stacks are not asked for then: torch's stack handler and the server's stop at exit can block
    each other (server_stop.stop_worker_server)."""
    try:
        return record_at_exit(run_dir, rank).stat().st_mtime >= proc.create_time()
    except (OSError, psutil.Error):
        return False


def askable(run_dir, procs: list[psutil.Process], running: list[int | None]) -> list[int]:
    """The ranks whose stacks may be asked for: not one that has ended its script (``ended_here``)."""
    return [r for p, r in zip(procs, running) if r is not None and not ended_here(run_dir, r, p)]


def exit_record(run_dir, rank: int, proc: psutil.Process) -> dict | None:
    """The flight record the rank wrote at its exit (the bootstrap's atexit, before its server stops), if
    this process wrote it (a record older than the process is an earlier attempt's)."""
    import json

    from . import job_files

    try:
        if not ended_here(run_dir, rank, proc):
            return None
        record = json.loads(job_files.read_text(record_at_exit(run_dir, rank)))
    except (OSError, ValueError, psutil.Error):
        return None
    return record if isinstance(record, dict) else None


def runs_python(proc: psutil.Process) -> bool:
    """Whether a process runs Python: the one test for a rank (torchrun's worker, a rank attach finds) and for a
    rank's descendant whose work is the rank's own kind (a DataLoader's worker, a multiprocessing child), not a
    helper's (a compiler, ninja, a linker). Its name or its argv[0] says python: either can change without the
    other (a process that set its title keeps its name, an interpreter started through a link of another name
    keeps its argv[0]). The name is read first, argv[0] only when it does not tell. False when the process
    cannot be read (gone, or not ours to read)."""
    try:
        if "python" in (proc.name() or "").lower():
            return True
        return "python" in ((proc.cmdline() or [""])[0] or "").lower()
    except psutil.Error:
        return False
