"""A rank's flight record on request, through torch's own dump pipe, where the job set it up.

ProcessGroupNCCL opens a named pipe ``${TORCH_NCCL_DEBUG_INFO_PIPE_FILE}<rank>.pipe`` when that variable is set
and the flight recorder is on (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0). Anything written to it makes torch's
monitor thread dump the flight record, pickled, to ``${TORCH_FR_DUMP_TEMP_FILE}<rank>`` (older name
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default ``/tmp/nccl_trace_rank_``); training goes on. This is the one
write attach makes to a job, and only to a pipe torch made: never to a regular file or through a link. The dump
is read like any dump (launch.fr_dumps: a pickle is data, read with the plain unpickler).
"""
from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import Mapping

from ...launchers import env_int

DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"
POLL_S = 0.1


def paths(env: Mapping[str, str], rank: int) -> tuple[str, str] | None:
    """(the pipe, the dump file) torch uses for this rank, or None when the job did not ask for a dump pipe."""
    stem = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    size = env_int(env, "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")
    if not stem or not size:
        return None
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or DEFAULT_DUMP_PREFIX
    return f"{stem}{rank}.pipe", f"{prefix}{rank}"


def request(pipe: str) -> bool:
    """Ask torch for a dump: one byte written to its pipe, without blocking. False when the path is no pipe,
    or no process reads it (torch has not opened it: no NCCL group yet, or the job ended)."""
    try:
        if not stat.S_ISFIFO(os.lstat(pipe).st_mode):
            return False
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False  # ENXIO: nobody reads it; ENOENT, ELOOP, EACCES: not torch's pipe for us
    try:
        os.write(fd, b"1")
        return True
    except OSError as exc:
        return exc.errno == errno.EAGAIN  # the pipe is full of earlier requests: one is pending anyway
    finally:
        os.close(fd)


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def flight_record(pipe: str, dump_file: str, timeout: float) -> dict | None:
    """The rank's flight record dumped on request: the dump file once it is newer than the request and reads
    whole; None when torch did not answer within ``timeout`` seconds."""
    from ..fr_dumps import read_dump

    before = _mtime(dump_file)
    if not request(pipe):
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = _mtime(dump_file)
        if now is not None and (before is None or now > before):  # torch's answer, not an earlier dump
            record = read_dump(Path(dump_file))  # a half-written pickle reads as None: try again
            if record is not None:
                return record
        time.sleep(POLL_S)
    return None
