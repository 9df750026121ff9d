"""Unit tests of ddpdoctor/lifetime.py (a child dies with its parent, even a SIGKILLed one; a stop signal whose
exception lands where Python ignores exceptions is sent again) and devices.py
(CUDA usable / an NVIDIA driver present: each answer never raises, a broken torch is "no CUDA")."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddpdoctor import devices

# A parent that starts a child asking for PR_SET_PDEATHSIG (or not), prints the child's pid, then waits.
PARENT = """
import subprocess, sys
code = ("import sys, time; from ddpdoctor.lifetime import die_with_parent; "
        "ok = die_with_parent() if sys.argv[1] == 'tie' else True; print(int(ok), flush=True); time.sleep(60)")
child = subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), child.pid, flush=True)
import time; time.sleep(60)
"""


def _parent_and_child(mode: str) -> tuple[subprocess.Popen, psutil.Process, str]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    ok, pid = parent.stdout.readline().split()
    return parent, psutil.Process(int(pid)), ok


def test_a_tied_child_dies_when_its_parent_is_sigkilled():
    parent, child, ok = _parent_and_child("tie")
    try:
        assert ok == "1"  # Linux: the kernel accepted the request
        parent.kill()
        parent.wait(10)
        gone, alive = psutil.wait_procs([child], timeout=10)
        assert gone and not alive
    finally:
        for p in (child,):
            if p.is_running():
                p.kill()
        parent.stdout.close()


def test_an_untied_child_outlives_its_parent():
    """The control: without the request the orphan lives on (what the tie exists to prevent)."""
    parent, child, _ = _parent_and_child("free")
    try:
        parent.kill()
        parent.wait(10)
        time.sleep(0.5)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        child.kill()
        parent.stdout.close()


def test_cuda_available_is_false_not_an_error_with_a_broken_torch(tmp_path):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise OSError('libcudart.so.12: cannot open shared object file')\n")
    code = "from ddpdoctor.devices import cuda_available; print(cuda_available())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_the_driver_answer_reads_proc_and_dev_without_torch():
    expected = os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")
    assert devices.nvidia_driver_present() is expected


# SIGTERM's handler runs inside a weakref callback (as inside importlib's module-lock clean-up during an import):
# Python ignores an exception raised there.
LOST_STOP = """
import os, signal, time, weakref
from ddpdoctor import lifetime
from ddpdoctor.cli import _on_sigterm
signal.signal(signal.SIGTERM, _on_sigterm)
if os.environ.get("REDELIVER") == "1":
    lifetime.redeliver_lost_stops()
if os.environ.get("SLOW_TIMER") == "1":  # a loaded machine: the resent signal arrives before the hook returns
    import threading
    start, slowed = threading.Timer.start, []

    def slow_start(self):
        start(self)
        began = time.monotonic()
        try:
            while not slowed and time.monotonic() - began < 0.5:
                pass  # the timer fires in here, still inside the hook
        finally:
            slowed.append(1)

    threading.Timer.start = slow_start

class Lock:
    pass

def cleanup(ref):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100000):
        pass  # the handler runs here

lock = Lock()
ref = weakref.ref(lock, cleanup)
del lock
try:
    for _ in range(int(os.environ["TICKS"])):  # long enough for the resent signal on a loaded box
        time.sleep(0.01)
    print("ran on", flush=True)
except lifetime.Terminated:
    print("terminated", flush=True)
"""


def test_a_stop_raised_where_python_ignores_exceptions_is_sent_again():
    def run(redeliver: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", LOST_STOP], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "REDELIVER": redeliver, "TICKS": "100" if redeliver == "0" else "3000"})

    lost = run("0")
    assert lost.stdout.strip() == "ran on" and "Exception ignored" in lost.stderr, lost  # what it did before
    kept = run("1")
    assert kept.stdout.strip() == "terminated" and "Exception ignored" not in kept.stderr, kept


def test_a_resent_stop_that_arrives_before_the_hook_returned_is_sent_once_more():
    kept = subprocess.run([sys.executable, "-c", LOST_STOP], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "REDELIVER": "1", "SLOW_TIMER": "1", "TICKS": "3000"})
    assert kept.stdout.strip() == "terminated" and "Exception ignored" not in kept.stderr, kept


def test_the_signal_a_stop_exception_stands_for():
    import signal

    from ddpdoctor.lifetime import Terminated, stop_signal_of

    class SignalException(Exception):  # torch's, as torch.distributed.elastic defines it
        def __init__(self, sigval):
            self.sigval = sigval

    assert stop_signal_of(Terminated()) == signal.SIGTERM and stop_signal_of(KeyboardInterrupt()) == signal.SIGINT
    assert stop_signal_of(SignalException(signal.SIGHUP)) == signal.SIGHUP
    assert stop_signal_of(ValueError("x")) is None and stop_signal_of(None) is None


HELD_IMPORT = r'''
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[1])
from ddpdoctor.lifetime import Terminated, import_held

def on_term(signum, frame):
    raise Terminated(signum)

signal.signal(signal.SIGTERM, on_term)
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # a thread that blocks no signal
try:
    mod = import_held("slow_mod")
except Terminated:
    import slow_mod
    print("after", slow_mod.inside)
else:
    print("lost", mod.inside)
'''

SLOW_MOD = r'''
import os, signal, time
inside = "clean"
try:
    os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop while the module (torch) loads
    time.sleep(0.5)
except BaseException as exc:  # what torch's import does to an exception raised inside it: swallowed
    inside = f"raised inside: {type(exc).__name__}"
'''


@pytest.mark.timeout(60)
def test_a_stop_during_a_held_import_comes_after_it_even_with_another_thread_running(tmp_path):
    """The kernel gives a process's signal to any thread that does not block it, and Python runs the handler in
    the main thread whatever its mask: blocking alone let nccl-bench's SIGTERM be raised inside torch's import
    (numpy's, under it), swallowed there, and the sweep ran to the end with exit 0."""
    import subprocess
    import sys

    (tmp_path / "slow_mod.py").write_text(SLOW_MOD)
    root = str(Path(__file__).resolve().parents[3])
    out = subprocess.run([sys.executable, "-c", HELD_IMPORT, root], cwd=tmp_path, capture_output=True, text=True,
                         timeout=50, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.stdout.strip() == "after clean", out.stdout + out.stderr
