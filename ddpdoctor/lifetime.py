"""A process's lifetime: a child's tied to its parent's (the one place that asks Linux for PR_SET_PDEATHSIG), and
torch imported with the stop signals held back (the one place that does)."""
from __future__ import annotations

import signal

PR_SET_PDEATHSIG = 1


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
    """Import ``module`` (torch's) with SIGTERM and SIGINT held back. The command's handler raises, and raised
    inside torch's native initialisation it ends the process with `terminate called ... error_already_set`
    (rc -6), or leaves torch half-loaded so the next import fails ("cannot load module more than once per
    process": exit 4), or is swallowed by torch's own clean-up (the signal ignored). Held back, the signal is
    delivered the moment the import is done, and unwinds like any other (exit 143/130)."""
    import importlib
    import threading

    held = {signal.SIGTERM, signal.SIGINT}
    on_main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held) if on_main else None
    try:
        return importlib.import_module(module)
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
