"""The exit codes of every ddpdoctor command: one IntEnum, the table README and `ddpdoctor --help` show."""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a ddpdoctor process ends with (also a document's `exit_code`)."""

    OK = 0             # passed; warnings allowed
    FAIL = 1           # a check, a benchmark or the training run failed
    USAGE = 2          # usage or bad input: one line on stderr
    NOT_ASSEMBLED = 3  # the cluster did not assemble (master unreachable, nodes missing at the timeout)
    INTERNAL = 4       # a bug: one line, the traceback with -v
    NOT_VERIFIED = 5   # a cluster node without the run's key or token: the master's verdict could be a forgery
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143   # SIGTERM (128 + SIGTERM)

    def __str__(self) -> str:  # "1", as on Python >= 3.11, also on 3.10 (where str() gave "ExitCode.FAIL")
        return str(int(self))
