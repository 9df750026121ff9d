"""Unit tests of ddpdoctor/forensics/evidence/procs.py's runs_python: the one test of "is this process Python"
that torchrun's workers, attach's discovery of ranks and the live watchdog's helpers (descendants that are not
Python) all ask."""
from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from ddpdoctor.forensics.evidence import procs
from ddpdoctor.forensics.evidence.procs import runs_python


class Proc:
    """What runs_python reads of a psutil.Process: its name and its command line, or the error reading raises."""

    def __init__(self, name="", argv=(), error: Exception | None = None, argv_error: Exception | None = None):
        self._name, self._argv, self._error, self._argv_error = name, list(argv), error, argv_error

    def name(self):
        if self._error:
            raise self._error
        return self._name

    def cmdline(self):
        if self._argv_error:
            raise self._argv_error
        return self._argv


@pytest.mark.parametrize("proc, expected", [
    (Proc("python3.11", ["/usr/bin/python3.11", "train.py"]), True),  # a rank as torchrun starts it
    (Proc("python", ["/venv/bin/python", "-m", "torch.distributed.run"]), True),
    (Proc("Python", ["/opt/homebrew/bin/Python"]), True),  # the case never matters
    (Proc("pt_main_thread", ["/venv/bin/python3", "train.py"]), True),  # renamed itself: argv[0] still says so
    (Proc("train", ["/venv/bin/python3", "train.py"]), True),  # setproctitle
    (Proc("python3", ["my-title"]), True),  # argv rewritten: the name still says so
    (Proc("python3", []), True),  # the name alone tells; argv is never needed
    (Proc("python3", argv_error=psutil.AccessDenied(1)), True),
    (Proc("pt_data_worker", ["/venv/bin/python", "-c", "from multiprocessing.spawn import spawn_main"]), True),
    (Proc("ninja", ["/usr/bin/ninja", "-j8"]), False),  # a helper: a build the rank started
    (Proc("cc1plus", ["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-quiet"]), False),
    (Proc("ld", ["ld", "-o", "op.so"]), False),
    (Proc("bash", ["/bin/bash", "run.sh"]), False),  # a shell whose argument is a Python script is not Python
    (Proc("sh", ["sh", "-c", "python train.py"]), False),
    (Proc("", []), False),  # nothing to read: a zombie's empty command line
    (Proc("", [""]), False),
    (Proc("ninja", argv_error=psutil.ZombieProcess(1)), False),
    (Proc(error=psutil.NoSuchProcess(1)), False),  # gone
    (Proc(error=psutil.AccessDenied(1)), False),  # not ours to read
])
def test_runs_python(proc, expected):
    assert runs_python(proc) is expected


def test_the_agents_workers_are_its_python_children_only():
    """procs.workers: a child that is no Python (a shell the agent started) is no worker."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]),
                subprocess.Popen(["sleep", "30"])]
    try:
        found = {p.pid for p in procs.workers(os.getpid())}
        assert children[0].pid in found and children[1].pid not in found
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=10)


def test_the_bytes_a_process_moved_grow_with_what_it_writes_and_say_none_when_unreadable(tmp_path):
    """The movement policy's I/O rule reads them (judge.policy.IO_MOVES_BYTES): a write of 1 MiB shows."""
    me = psutil.Process()
    before = procs.bytes_moved([me])
    (tmp_path / "out.bin").write_bytes(b"x" * (1 << 20))
    after = procs.bytes_moved([me])
    assert before is not None and after - before >= 1 << 20

    class Gone:
        def io_counters(self):
            raise psutil.NoSuchProcess(1)

    assert procs.bytes_moved([Gone()]) is None and procs.bytes_moved([]) is None
    assert procs.bytes_moved([Gone(), me]) >= after


def test_stacks_of_a_rank_that_does_not_answer_come_from_py_spy_before_any_signal(tmp_path):
    """A rank's own SIGUSR1 handler (Lightning's SLURM requeue: a checkpoint and `scontrol requeue`) must not run
    at the watchdog's request: py-spy reads the stack from outside; before, SIGUSR1 went first."""
    from ddpdoctor.forensics.evidence import pyspy

    if not pyspy.binary():
        pytest.skip("no py-spy")
    marker = tmp_path / "handled"
    code = ("import os, signal, time\n"
            f"signal.signal(signal.SIGUSR1, lambda s, f: open({str(marker)!r}, 'w').close())\n"
            "def own_loop():\n    while True:\n        time.sleep(0.05)\n"
            "print('ready', flush=True)\nown_loop()\n")
    child = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, RANK="3"), stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        got = procs.signal_stacks([psutil.Process(child.pid)], tmp_path / "stacks")
        assert "own_loop" in got.get(3, ""), got
        assert not marker.exists()  # the job's handler never ran
    finally:
        child.kill()
        child.wait(timeout=10)
