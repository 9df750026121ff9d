"""A rank's torch error file (error.json, what `@record` writes for an uncaught exception): written whole or not
at all, its text redacted, and a SIGTERM that arrives meanwhile made to wait for it (bootstrap.py's handler).
Runs inside the user's process: small, silent, no import beyond the standard library until it is used."""
from __future__ import annotations

import os
import sys

GRACE_S = 3.0  # how long a SIGTERM waits for the rank's own error file to land


class _Flag:
    """Set while the main thread writes the error file; the SIGTERM helper waits (bounded) for it to clear."""

    def __init__(self) -> None:
        import threading

        self._done = threading.Event()
        self._done.set()
        self.pending = False  # a SIGTERM arrived on the writing thread itself

    def set(self) -> None:
        self._done.clear()

    def clear(self) -> None:
        self._done.set()

    def held_here(self) -> bool:
        import threading

        return not self._done.is_set() and threading.current_thread() is threading.main_thread()

    def wait_clear(self, timeout: float) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():  # the writer itself never waits on it
            self._done.wait(timeout)


RECORDING = _Flag()


def write(exc: BaseException) -> None:
    """torch's error file for ``exc``, appearing whole or not at all. torch's handler writes it in place
    (open "w", then dump): a rank stopped between the two (the launcher's SIGTERM after another rank failed)
    left it empty, and torchrun's agent then died reading it (JSONDecodeError: no failure table). torch writes
    to a side path here; the redacted text then replaces the real one in one rename."""
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    real = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not real:
        get_error_handler().record_exception(exc)
        return
    side = f"{real}.partial"
    os.environ["TORCHELASTIC_ERROR_FILE"] = side
    try:
        get_error_handler().record_exception(exc)
    finally:
        os.environ["TORCHELASTIC_ERROR_FILE"] = real
    redact_error_file(side, real)


def redact_error_file(path: str | None, dest: str | None = None) -> None:
    """error.json with its text redacted (the job's environment and arguments known, ``redact.know_job``),
    renamed into ``dest`` (default: in place): torchrun copies it onward (its failure table, a parent's
    TORCHELASTIC_ERROR_FILE) as it stands."""
    if not path or not os.path.isfile(path):
        return
    import json

    from ..redaction import know_job, redact_evidence

    dest = dest or path
    know_job(os.environ, sys.argv[1:])
    with open(path, encoding="utf-8", errors="replace") as f:
        data = redact_evidence(json.load(f))
    with open(f"{dest}.tmp", "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(f"{dest}.tmp", dest)
    if path != dest:
        os.unlink(path)
