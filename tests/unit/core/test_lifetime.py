"""ddpdoctor/lifetime.py's checkpoint signals: run-trainer's agent ignores SIGUSR1/SIGUSR2 (a scheduler's --signal
to the whole step would end it, and the job with it); each rank gets the default back, so the job's own handlers
and defaults are as under plain torchrun."""
from __future__ import annotations

import signal
import subprocess
import sys

from ddpdoctor import lifetime

CHILD = """
import signal, sys
from ddpdoctor import lifetime
before = [signal.getsignal(s) is signal.SIG_IGN for s in lifetime.CHECKPOINT_SIGNALS]
lifetime.restore_checkpoint_signals()
after = [signal.getsignal(s) is signal.SIG_DFL for s in lifetime.CHECKPOINT_SIGNALS]
print(before, after)
"""


def test_the_agents_ignoring_crosses_exec_and_the_rank_gets_the_default_back():
    env_on = {lifetime.AGENT_IGNORED_ENV: "SIGUSR1,SIGUSR2"}
    p = subprocess.run([sys.executable, "-c", CHILD], preexec_fn=lifetime.ignore_checkpoint_signals,
                       capture_output=True, text=True, timeout=60, env={**__import__("os").environ, **env_on})
    assert p.stdout.split() == ["[True,", "True]", "[True,", "True]"], p.stderr
    # without the agent's note (a rank run by another launcher) an ignored signal is left as its parent set it
    p = subprocess.run([sys.executable, "-c", CHILD], preexec_fn=lifetime.ignore_checkpoint_signals,
                       capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in __import__("os").environ.items() if k != lifetime.AGENT_IGNORED_ENV})
    assert p.stdout.split() == ["[True,", "True]", "[False,", "False]"], p.stderr


def test_only_the_checkpoint_signals_are_restored():
    old = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        lifetime.restore_checkpoint_signals({lifetime.AGENT_IGNORED_ENV: "SIGHUP,SIGKILL,junk,"})
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN  # nohup's choice stays the user's
    finally:
        signal.signal(signal.SIGHUP, old)
