"""nccl-bench's stop handler (ddpdoctor/bench/spawn.py): a stop signal never unwinds the start of a rank."""
from __future__ import annotations

import signal
import sys

import pytest

from ddpdoctor.bench import spawn


def test_a_stop_signal_waits_out_the_start_of_a_rank(monkeypatch):
    """Raised between a rank's exec and the write of its start-up data (multiprocessing's Popen._launch), the
    stop left the rank printing an EOFError traceback: there the signal is sent again a moment later; anywhere
    else it is torch's SignalException, as torch's own handler raises it."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    resent = []

    class Timer:
        def __init__(self, delay, fn, args):
            resent.append((delay, fn, args))

        def start(self):
            pass

    monkeypatch.setattr(spawn.threading, "Timer", Timer)
    monkeypatch.setattr(spawn, "PENDING", {}, raising=False)  # the stop this test raises stays its own
    scope: dict = {}
    exec(compile("import sys\ndef _launch(handle):\n    return handle(sys._getframe())\n",
                 "/usr/lib/python3.11/multiprocessing/popen_spawn_posix.py", "exec"), scope)
    assert scope["_launch"](lambda frame: spawn._stop_the_ranks(signal.SIGTERM, frame)) is None
    assert resent and resent[0][1] is spawn.os.kill and resent[0][2][1] == signal.SIGTERM
    with pytest.raises(SignalException) as exc:
        spawn._stop_the_ranks(signal.SIGINT, sys._getframe())
    # the agent stops the ranks with SIGTERM (a rank ends at once, silently); the command ends as Ctrl-C says
    assert exc.value.sigval == signal.SIGTERM and exc.value.received_signal == signal.SIGINT and len(resent) == 1


def test_torchs_launcher_is_told_to_leave_the_stop_signals_to_this_handler(tmp_path):
    """torch >= 2.9 sets TORCHELASTIC_SIGNALS_TO_HANDLE from LaunchConfig.signals_to_handle (all four by default)
    over the environment: its own handler then took Ctrl-C, closed the ranks with SIGINT (each still importing
    torch printed a KeyboardInterrupt traceback) and waited torch's 30 s grace for a rank in a collective."""
    import os

    lc = spawn._launch_config({}, spawn.LaunchPlan(nproc=2), str(tmp_path), str(tmp_path / "progress"))
    try:
        assert getattr(lc, "signals_to_handle", "SIGQUIT") == "SIGQUIT"
    finally:
        os.environ.pop(spawn.CONFIG_ENV, None)
        os.environ.pop(spawn.PROGRESS_ENV, None)


def test_the_wake_thread_is_quiet_when_its_folder_is_gone(tmp_path):
    """Round 4: once the command removed the progress folder, the wake thread (which reads the heartbeats when
    a rank ends) printed a FileNotFoundError traceback under the command's exit line."""
    import subprocess
    import threading

    assert spawn._read_notes(str(tmp_path / "gone"), ".beat") == []
    raised: list = []
    hook, threading.excepthook = threading.excepthook, lambda args: raised.append(args.exc_value)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    done, beats = threading.Event(), []
    waker = threading.Thread(target=spawn._wake_stopped_ranks, args=(done, str(tmp_path / "gone"), beats))
    try:
        waker.start()
        child.wait(timeout=30)  # a child seen running, then ended: the thread reads the (missing) heartbeats
        threading.Event().wait(1.2)
    finally:
        done.set()
        waker.join(timeout=10)
        threading.excepthook = hook
    assert not waker.is_alive() and raised == [] and beats == []


def test_a_stop_that_escapes_as_torchs_exception_is_the_signals_exit_not_an_internal_error(capsys):
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from ddpdoctor.cli import _stopped_by

    exc = SignalException("got signal", sigval=signal.SIGTERM)
    assert _stopped_by(exc) == 143 and "terminated (SIGTERM)" in capsys.readouterr().err
    exc.received_signal = signal.SIGINT
    assert _stopped_by(exc) == 130 and "interrupted" in capsys.readouterr().err
    assert _stopped_by(ValueError("x")) is None
