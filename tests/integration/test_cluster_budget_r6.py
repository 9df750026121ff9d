"""Round 6 (issue 47, item 12): a preflight node ends within 2 T + 15 s of its process's start, not of the moment
its engine began: a master on a loaded machine spent 8 s in the interpreter's start and the imports, uncounted,
and ended at 55 s against its 47 s. Here the start-up is made long on purpose (a sleep before the console script's
main): the wait for the nodes ends T after the process started."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

STARTUP_S = 12.0
T = 10

SLOW_START = f"""
import sys, time
time.sleep({STARTUP_S})
from ddpdoctor.cli import main
sys.argv = ["ddpdoctor"] + sys.argv[1:]
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_12_the_budget_counts_the_processs_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "PMI", "OMPI", "RANK", "WORLD"))}
    argv = [sys.executable, "-c", SLOW_START, "preflight", "--nnodes", "2", "--master",
            f"127.0.0.1:{_free_port()}", "--node-rank", "0", "--local-addr", "127.0.0.1", "--timeout", str(T),
            "--no-save"]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=100, env=env, cwd=tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 3, p.stdout + p.stderr  # the second node never came
    # before: the wait for the nodes began after the start-up, ending at STARTUP_S + T (22 s) or later
    assert took < STARTUP_S + T - 2, (took, p.stderr[-2000:])
