"""`preflight --local-nodes N`: a whole cluster on this machine, one process per node on 127.0.0.1..N.

It runs the very same node code as a real cluster (separate processes, real sockets, the master's
TCPStore); only the addresses are loopback ones. The master's JSON is the result. Every child is in its
own process group and is killed on any exit path, so Ctrl-C leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable

from ..errors import ClusterNotAssembled


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


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
            argv = [sys.executable, "-m", "ddpdoctor", *worker_argv(i, n, master)]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=None if not quiet else subprocess.DEVNULL,
                                          env=env, start_new_session=True, text=True))
        limit = time.monotonic() + 3 * timeout + 30  # three bounded phases, plus interpreter start-up
        outputs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1.0, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise ClusterNotAssembled(f"local node pid {p.pid} did not finish in time") from None
            outputs.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
    code, out = outputs[0]
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise ClusterNotAssembled(f"the local cluster did not assemble (master exit code {code}); "
                                  f"run without -q to see each node's messages") from None
    doc["local_nodes"] = {"n": n, "exit_codes": [c for c, _ in outputs]}
    return doc
