"""A process's lifetime: when the command's process started (what a budget "from the start" counts from), a child's
tied to its parent's (the one place that asks Linux for PR_SET_PDEATHSIG), torch imported with the stop signals
held back (the one place that does), and a stop never lost to a place that ignores exceptions."""
from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, schedulers and Ctrl-C-less tools send) or SIGHUP (a dropped ssh session): unwinds
    like Ctrl-C, so every `finally` that stops child processes runs, and ends with 128 + the signal (143, 129;
    the command's handler raises it)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # what stops a command: each unwinds, none kills
_STARTED: list[float] = []  # the console script's process start (monotonic clock), once mark_command_start ran
MAX_STARTUP_S = 60.0  # a "start" longer ago than this is not the command's own (a process that ran other work)


def mark_command_start() -> None:
    """Record when this process started (the console script calls it first): a loaded node spends seconds in the
    interpreter's start and the imports before any command code, and a promise such as preflight's "every node
    ends within 2 T + 15 s of its start" counts them (a master ended 8 s past it on a loaded machine)."""
    import time

    since = _process_age()
    _STARTED[:] = [time.monotonic() - min(since, MAX_STARTUP_S)]


def _process_age() -> float:
    """Seconds since this process started, from the kernel's own counters (/proc/uptime and the process's start
    tick), never the wall clock: a node whose clock is off (faketime +5 s, an NTP step) read its start 5 s early
    and began its meeting with its join window spent ("refused after 0.0 s, 1 attempt(s)")."""
    try:
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        import time

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no psutil or no /proc: from here
        return 0.0


def command_start() -> float | None:
    """The recorded process start, or None (the command runs inside another program: it counts from its call)."""
    return _STARTED[0] if _STARTED else None


# A scheduler's "checkpoint now" signals (SLURM's --signal=USR1@90, Lightning's auto-requeue; scancel --signal=USR2):
# the job's ranks handle them; torchrun (no handler: its default action ends it) and run-trainer must not die of
# them and take the job along. run-trainer's agent starts with them ignored; each rank gets the default back
# (AGENT_IGNORED_ENV names them), its own handler then as without ddpdoctor.
CHECKPOINT_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
AGENT_IGNORED_ENV = "DDPDOCTOR_AGENT_IGNORED_SIGNALS"


def ignore_checkpoint_signals() -> None:
    """In torchrun's child, before its exec: an ignored signal stays ignored across exec."""
    for sig in CHECKPOINT_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def restore_checkpoint_signals(env=None) -> None:
    """In a rank: the default action again for what run-trainer's agent ignored (AGENT_IGNORED_ENV), where it is
    still ignored, so the rank meets them as under plain torchrun."""
    import os

    names = ((env if env is not None else os.environ).get(AGENT_IGNORED_ENV) or "").split(",")
    for name in names:
        sig = getattr(signal, name.strip(), None) if name.strip().startswith("SIG") else None
        if sig in CHECKPOINT_SIGNALS and signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent (the thread that started it) dies, even
    by SIGKILL: no orphan is left blocked on peers that are gone. False where it is not available (not
    Linux): then the parent's own clean-up is all there is."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig)) == 0
    except (OSError, AttributeError):
        return False


def import_held(module: str):
    """Import ``module`` (torch's) with SIGTERM, SIGINT and SIGHUP held back. The command's handler raises, and raised
    inside torch's native initialisation it ends the process with `terminate called ... error_already_set`
    (rc -6), or leaves torch half-loaded so the next import fails ("cannot load module more than once per
    process": exit 4), or is swallowed by torch's own clean-up (the signal ignored). Held back, the signal is
    delivered the moment the import is done, and unwinds like any other (exit 143/130)."""
    import importlib
    import threading

    if threading.current_thread() is not threading.main_thread():
        return importlib.import_module(module)  # only the main thread runs Python's signal handlers
    # Blocking the signals in this thread is not enough: the kernel hands a process's signal to any thread that
    # does not block it (a progress or watchdog thread started before), and Python then runs the handler in the
    # main thread, inside the import, whatever its mask (seen: nccl-bench's SIGTERM 0.3 s after start, raised in
    # numpy's import under torch's and swallowed there, so the whole sweep ran and exited 0). So the Python-level
    # handlers only note the signal while the import runs; the command's own handler gets it after.
    noted: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: noted.append(signum))
    try:
        return importlib.import_module(module)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one still pending in this thread goes to its handler
        for sig in dict.fromkeys(noted):
            signal.raise_signal(sig)  # the command's handler: it raises, and the stop unwinds from here


def redeliver_lost_stops() -> None:
    """A stop signal's exception (SIGTERM's, Ctrl-C's KeyboardInterrupt, torch's SignalException) raised where
    Python ignores exceptions (a weakref callback such as importlib's module-lock clean-up, a ``__del__``) was
    printed as "Exception ignored in ..." and lost: the process ran on until its own timeout. Such an exception
    is sent again as its signal, to be raised at the next ordinary line; every other one goes to the hook
    that was there."""
    import sys
    import threading

    previous = sys.unraisablehook
    main = threading.main_thread().ident

    def send_later(sig: int) -> None:
        # From another thread, a moment later: a signal sent to oneself runs its handler at once, here, inside
        # the place that ignores exceptions. To the main thread, so that a blocking call there is interrupted.
        try:
            timer = threading.Timer(0.01, signal.pthread_kill, (main, sig))
            timer.daemon = True
            timer.start()
        except RuntimeError:  # no new thread at interpreter shutdown: the process is ending anyway
            pass

    def hook(unraisable) -> None:
        sig = stop_signal_of(unraisable.exc_value)
        if sig is None:
            previous(unraisable)
            return
        for _ in range(8):  # bounded: each pass is one signal sent and, at worst, one caught here
            try:
                send_later(sig)
                return
            except BaseException as exc:  # noqa: BLE001 - only the signal just sent can be raised here
                # On a loaded machine the timer can fire before this hook has returned (Timer.start waits for
                # its thread): the stop is raised in here, where it would be lost again. Send it once more.
                if stop_signal_of(exc) is None:
                    raise

    sys.unraisablehook = hook


def stop_signal_of(exc: BaseException | None) -> int | None:
    """The signal a stop exception stands for: torch's SignalException carries it (``sigval``, or the one that
    came when the ranks are told another: ``received_signal``, nccl-bench's); Terminated is SIGTERM's; any other
    KeyboardInterrupt is Ctrl-C's."""
    sigval = getattr(exc, "received_signal", None) or getattr(exc, "sigval", None)
    if isinstance(sigval, int):
        return int(sigval)
    if isinstance(exc, KeyboardInterrupt):
        return getattr(exc, "signum", signal.SIGTERM) if isinstance(exc, Terminated) else signal.SIGINT
    return None
