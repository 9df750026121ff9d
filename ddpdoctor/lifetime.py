"""A child process's lifetime tied to its parent's: the one place that asks Linux for PR_SET_PDEATHSIG."""
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
