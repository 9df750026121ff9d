"""Signals and run-trainer: a stop (SIGTERM, SIGINT, SIGHUP) stops the job and the post-mortem still runs; a
scheduler's checkpoint signals (SIGUSR1, SIGUSR2) stop nothing; torchrun's child set up to die with run-trainer
and to outlive those signals."""
from __future__ import annotations

import signal
import sys
import subprocess
import threading
import time
from typing import Protocol

from ..forensics.evidence import procs
from ..forensics.live import hang
from ..lifetime import CHECKPOINT_SIGNALS, die_with_parent, ignore_checkpoint_signals


class Mutes(Protocol):
    """Where the job's output is echoed (run.Terminal): quiet from the moment the stop begins."""

    def mute(self) -> None: ...


def agent_child() -> None:
    """In torchrun's child: a SIGKILLed run-trainer still takes torchrun along, and with it the workers (each
    dies with the agent: bootstrap.die_with_the_agent). SIGKILL, not SIGTERM: on SIGTERM torchrun stops its
    workers but can then hang in its own shutdown for good (seen in CI: torchrun alive 15 minutes later, its
    ranks unreaped zombies), and no run-trainer is left to end it. A scheduler's SIGUSR1/SIGUSR2 to the whole step
    (a checkpoint request) is ignored by the agent, which has no handler and would die of it (lifetime.py)."""
    die_with_parent(signal.SIGKILL)
    ignore_checkpoint_signals()


class StopOnSignal:
    """SIGTERM or SIGINT to run-trainer stops the job instead of ending run-trainer: torchrun gets the signal
    (unless it already has it, from a terminal's Ctrl-C to the whole group: a second one would cut its own
    orderly shutdown short), whatever is left after the grace period gets SIGKILL, and the post-mortem and
    run.json still happen. The signal is kept for the exit code (128 + signal)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # SIGHUP: a dropped ssh session, the same stop

    def __init__(self, grace: float = 40.0):
        self.grace, self.signum, self.proc = grace, None, None
        self.at: float | None = None  # when the signal came
        self.watchdog: hang.Watchdog | None = None
        self.agent_noticed = threading.Event()
        self._old: dict = {}
        self._stopper: threading.Thread | None = None
        self._known: list = []
        self._said: set[int] = set()
        self.terminal: Mutes | None = None

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
            self._old.update({s: signal.signal(s, self._on_checkpoint_signal) for s in CHECKPOINT_SIGNALS})
        return self

    def _on_checkpoint_signal(self, signum, frame) -> None:
        """SIGUSR1/SIGUSR2 (a scheduler's --signal to every process of the step): no stop. Said once each."""
        if signum not in self._said:
            self._said.add(signum)
            name = signal.Signals(signum).name
            print(f"ddpdoctor: {name} received (a scheduler's --signal or scancel --signal: a checkpoint request); "
                  "not a stop: the job goes on. A scheduler signals the ranks themselves; by hand, signal the "
                  "ranks' processes (`pkill -USR1 -f YOUR_SCRIPT`)", file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def attach(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        if self.signum is not None:
            self._start_stopping()

    def watch(self, dog: hang.Watchdog) -> None:
        """The hang watchdog stands down when the stop begins: the ranks the stop ends first leave the others
        waiting, and that is no hang (seen in CI: a SIGINT judged as a hang of the rank that ended first)."""
        self.watchdog = dog
        if self.signum is not None:
            dog.stand_down()

    def wait_stopped(self) -> None:
        if self._stopper is not None:
            self._stopper.join()

    def _on_signal(self, signum, frame) -> None:
        if self.signum is None:  # a second Ctrl-C changes nothing: the job is being stopped already
            self.signum, self.at = signum, time.time()
            if self.watchdog is not None:
                self.watchdog.stand_down()
            if self.proc is not None:
                self._start_stopping()

    def _start_stopping(self) -> None:
        if self.terminal is not None:
            self.terminal.mute()
        self._known = procs.family(self.proc.pid)[1:]  # now: the workers, before torchrun can exit without them
        self._stopper = threading.Thread(target=self._stop, name="ddpdoctor-stop", daemon=True)
        self._stopper.start()

    def _stop(self) -> None:
        noticed = self.agent_noticed.wait(2.0)
        procs.stop_agent(self.proc, self.grace, sig=None if noticed else self.signum, known=self._known)
