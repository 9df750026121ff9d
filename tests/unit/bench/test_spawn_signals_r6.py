"""Round 6 (issue 47, item 10) of nccl-bench's stop handler: a stop that lands in an import is sent again once it is
done (raised there it left a module half loaded: exit 4, "cannot load module more than once"); a stop whose
exception torch's code swallowed is sent again while the launch runs on; one that comes while the agent already
stops the ranks lets it finish."""
from __future__ import annotations

import signal
import time

import pytest

from ddpdoctor.bench import spawn


@pytest.fixture
def resent(monkeypatch):
    sent: list = []

    class Timer:
        def __init__(self, delay, fn, args):
            sent.append(args)

        def start(self):
            pass

    monkeypatch.setattr(spawn.threading, "Timer", Timer)
    monkeypatch.setattr(spawn, "PENDING", {})
    return sent


def _frame_in(filename: str, name: str):
    scope: dict = {}
    exec(compile(f"import sys\ndef {name}(handle):\n    return handle(sys._getframe())\n", filename, "exec"), scope)
    return scope[name]


def test_10_a_stop_inside_an_import_is_sent_again_after_it(resent):
    importing = _frame_in("<frozen importlib._bootstrap>", "_load_unlocked")
    assert importing(lambda frame: spawn._stop_the_ranks(signal.SIGTERM, frame)) is None
    assert resent and resent[0][1] == signal.SIGTERM


def test_10_a_swallowed_stop_is_sent_again_while_the_launch_runs(monkeypatch):
    import threading

    kills: list = []
    monkeypatch.setattr(spawn.os, "kill", lambda pid, sig: kills.append(sig))
    monkeypatch.setattr(spawn, "PENDING", {"signal": signal.SIGHUP, "raised": time.monotonic() - 5})
    done = threading.Event()
    spawn._resend_a_lost_stop(done)
    assert kills == [signal.SIGHUP]
    spawn._resend_a_lost_stop(done)  # not again before RESEND_S
    done.set()
    spawn.PENDING["raised"] = time.monotonic() - 5
    spawn._resend_a_lost_stop(done)  # nor once the launch is over
    assert kills == [signal.SIGHUP]


def test_10_a_second_stop_lets_the_agents_shutdown_finish(resent):
    from torch.distributed.elastic.multiprocessing.api import SignalException

    with pytest.raises(SignalException):
        spawn._stop_the_ranks(signal.SIGTERM, None)
    shutting = _frame_in("/x/torch/distributed/elastic/agent/server/local_elastic_agent.py", "_shutdown")
    assert shutting(lambda frame: spawn._stop_the_ranks(signal.SIGTERM, frame)) is None
    assert spawn.PENDING["signal"] == signal.SIGTERM
