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
    scope: dict = {}
    exec(compile("import sys\ndef _launch(handle):\n    return handle(sys._getframe())\n",
                 "/usr/lib/python3.11/multiprocessing/popen_spawn_posix.py", "exec"), scope)
    assert scope["_launch"](lambda frame: spawn._stop_the_ranks(signal.SIGTERM, frame)) is None
    assert resent and resent[0][1] is spawn.os.kill and resent[0][2][1] == signal.SIGTERM
    with pytest.raises(SignalException) as exc:
        spawn._stop_the_ranks(signal.SIGINT, sys._getframe())
    assert exc.value.sigval == signal.SIGINT and len(resent) == 1
