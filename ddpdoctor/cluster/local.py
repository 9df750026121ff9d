"""`preflight --local-nodes N`: a whole cluster on this machine, one process per node on 127.0.0.1..N.

It runs the very same node code as a real cluster (separate processes, real sockets, the master's
TCPStore); only the addresses are loopback ones. The master's JSON is the result. Every child is in its
own process group and is killed on any exit path, so Ctrl-C leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from typing import Callable

from ..errors import ClusterNotAssembled


def free_port(addr: str = "127.0.0.1", tries: int = 64) -> int:
    """A port free on ``addr`` now, drawn at random below the kernel's ephemeral range: a port the kernel hands
    out (bind to 0) is what every outgoing connection on the machine also gets, so between this check and the
    master's listen another process's connection could take it (seen: EADDRINUSE with two test files at once)."""
    low = _ephemeral_low()
    for _ in range(tries):
        port = random.randint(max(1024, low - 12000), low - 1)
        with socket.socket() as s:
            try:
                s.bind((addr, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every draw taken: the kernel's own choice
        s.bind((addr, 0))
        return s.getsockname()[1]


def _ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port of the kernel's ephemeral range (32768 by default, and where it cannot be read)."""
    try:
        with open(path) as fh:
            return max(2048, int(fh.read().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32768


def kill_sessions(procs: list[subprocess.Popen], wait_s: float = 10.0, grace_s: float = 5.0) -> None:
    """Stop the session of every process still running (each started with start_new_session=True): SIGTERM
    first, so a node removes what it made (the run's key file) as it unwinds, SIGKILL after ``grace_s``."""
    running = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in running:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        limit = time.monotonic() + (grace_s if sig == signal.SIGTERM else wait_s)
        for proc in running:
            try:
                proc.wait(timeout=max(0.01, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        running = [p for p in running if p.poll() is None]
        if not running:
            return


def child_python(isolated: bool = False) -> list[str]:
    """The interpreter and code a child node runs: this very ddpdoctor, whatever the working directory
    (``python -m ddpdoctor`` would import a ``ddpdoctor/`` folder that happens to sit in the cwd). ``isolated``
    (what root starts): Python's isolated mode too, so PYTHONPATH, PYTHONSTARTUP, PYTHONHOME and the user's site
    folder are not read (a local cluster keeps them: a test's or a user's environment is its own)."""
    import ddpdoctor

    root = os.path.dirname(os.path.dirname(os.path.abspath(ddpdoctor.__file__)))
    # the cwd ('' for -c) never on the path; this ddpdoctor's folder first
    code = (f"import sys; sys.path[:] = [{root!r}, *(p for p in sys.path if p not in ('', '.'))]; "
            "from ddpdoctor.cli import main; main()")
    return [sys.executable, *(["-I"] if isolated else []), "-c", code]


def _die_with_parent() -> None:
    """A node dies with this process, even when it is SIGKILLed (no orphan nodes)."""
    from ..lifetime import die_with_parent

    die_with_parent()


def node_addr(index: int) -> str:
    return f"127.0.0.{index + 1}"


def run_local_cluster(n: int, *, timeout: float, worker_argv: Callable[[int, int, str], list[str]] | None,
                      quiet: bool) -> dict:
    if worker_argv is None:
        raise ClusterNotAssembled("--local-nodes needs the command line to replicate")
    port = free_port()
    master = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        for i in range(n):
            argv = [*child_python(), *worker_argv(i, n, master)]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None if not quiet else subprocess.DEVNULL,
                                          env=env, start_new_session=True, text=True, preexec_fn=_die_with_parent))
        limit = time.monotonic() + 2 * timeout + 45  # every node's budget (2 T + 15 s) plus interpreter start-up
        outputs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1.0, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise ClusterNotAssembled(f"local node pid {p.pid} did not finish in time") from None
            outputs.append((p.returncode, out))
    finally:
        kill_sessions(procs)
    code, out = outputs[0]
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise ClusterNotAssembled(f"the local cluster did not assemble (master exit code {code}); "
                                  f"run without -q to see each node's messages") from None
    doc["local_nodes"] = {"n": n, "exit_codes": [c for c, _ in outputs]}
    return doc
