"""Round 6 (issue 47, item 10): nccl-bench obeys a stop whose exception torch's agent swallowed (an `except
Exception` on the way: before, both ranks measured on and the sweep ran to its end). The agent's monitor loop here
swallows the first SignalException, as such code would; the command still ends with 143 within seconds and leaves
no rank behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_bench_signals import finish, rank_pids, session_left

SWALLOWING = """
import sys, time as _time
import torch.distributed.elastic.agent.server.api as api
from torch.distributed.elastic.multiprocessing.api import SignalException
swallowed = []

class Time:
    def __getattr__(self, name):
        return getattr(_time, name)

    def sleep(self, s):
        try:
            _time.sleep(s)
        except SignalException:
            if swallowed:
                raise
            swallowed.append(1)  # as an `except Exception: log and go on` in torch's agent would

api.time = Time()
from ddpdoctor.cli import main
sys.argv = ["ddpdoctor"] + sys.argv[1:]
main()
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_10_a_stop_torch_swallowed_is_still_obeyed(tmp_path: Path, sig, code):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    argv = [sys.executable, "-c", SWALLOWING, "nccl-bench", "--backend", "gloo", "--no-save", "--nproc", "3",
            "-b", "4M", "-e", "256M", "-n", "50", "--timeout", "15"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(scratch)})
    try:
        pids = rank_pids(tmp_path)
        proc.send_signal(sig)
        rc, err, took = finish(proc, 60)
        assert rc == code, err[-3000:]
        assert "Traceback" not in err and "internal error" not in err, err[-3000:]
        assert took < 25, took
        time.sleep(1)
        assert session_left(proc.pid) == [], pids
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
