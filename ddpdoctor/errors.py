"""The one error policy's exceptions: what a user did wrong (exit 2) vs a cluster that did not assemble (3)."""
from __future__ import annotations

from .exitcodes import ExitCode


class DdpdoctorError(Exception):
    """Base: carries the exit code the CLI should end with."""

    exit_code = ExitCode.INTERNAL


class UsageError(DdpdoctorError):
    """Bad flags, bad files, bad config: one red line, exit 2."""

    exit_code = ExitCode.USAGE


class ClusterNotAssembled(DdpdoctorError):
    """The nodes never met (master unreachable, nodes missing at the timeout): exit 3."""

    exit_code = ExitCode.NOT_ASSEMBLED


class NothingReadable(DdpdoctorError):
    """attach found the job but could read none of its processes (no permission, py-spy refused): exit 3, one
    line saying what to run."""

    exit_code = ExitCode.NOT_ASSEMBLED
