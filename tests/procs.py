"""Process hygiene for tests that start whole process trees: kill each one's session, so nothing outlives a test."""
from __future__ import annotations

import os
import signal
import subprocess


def kill_sessions(procs: list[subprocess.Popen], wait_s: float = 10.0) -> None:
    """SIGKILL the session of every process still running (each was started with start_new_session=True)."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=wait_s)
