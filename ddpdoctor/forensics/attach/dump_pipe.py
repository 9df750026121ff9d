"""A rank's flight record on request, through torch's own dump pipe, where the job set it up.

ProcessGroupNCCL opens a named pipe ``${TORCH_NCCL_DEBUG_INFO_PIPE_FILE}<rank>.pipe`` when that variable is set
and the flight recorder is on (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0). Anything written to it makes torch's
monitor thread dump the flight record, pickled, to ``${TORCH_FR_DUMP_TEMP_FILE}<rank>`` (older name
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default ``/tmp/nccl_trace_rank_``); training goes on. This is the one
write attach makes to a job, and only to a pipe torch made: never to a regular file or through a link. Both the
request and the dump's reading are made with the job's rights, on the rank's own pipe and file only
(job_access). The dump is read like any dump (forensics.evidence.fr_dumps: a pickle is data, read with the plain unpickler).
"""
from __future__ import annotations

import struct
import time
from typing import Mapping

from ...launchers import env_int
from ..evidence.job_files import DUMP_BYTES as MAX_DUMP_BYTES
from . import job_access, job_paths

DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"
POLL_S = 0.1
NO_PIPE = b"no pipe"  # what the child answers when the rank's pipe is not there or nobody reads it
# torch 2.15's default "nccl" is ProcessGroupNCCL2, which opens no debug-info pipe (ProcessGroupNCCL.cpp, legacy
# only): a job that set the variable on 2.15 gets no pipe, and its flight record is not asked this way.
NO_PIPE_NOTE = ("the job set TORCH_NCCL_DEBUG_INFO_PIPE_FILE but no process reads {pipe}: torch 2.15's default "
                "\"nccl\" (ProcessGroupNCCL2) opens no debug-info pipe (only legacy ProcessGroupNCCL does: "
                "TORCH_DIST_USE_NCCL2=0 or backend \"nccl-legacy\"), nor does a job before its first NCCL group; "
                "its flight record was not asked (torch 2.15's debug server gives it: /fr_dump_file?backend=nccl2)")


def paths(env: Mapping[str, str], rank: int) -> tuple[str, str] | None:
    """(the pipe, the dump file) torch uses for this rank, or None when the job did not ask for a dump pipe."""
    stem = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    size = env_int(env, "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")
    if not stem or not size:
        return None
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or DEFAULT_DUMP_PREFIX
    return f"{stem}{rank}.pipe", f"{prefix}{rank}"


def request(rp, pipe: str) -> bool:
    """Ask torch for a dump: one byte written to the rank's pipe without blocking, with the job's rights
    (job_access: only a FIFO of the rank's uid that its process holds open, reached without a link). False when
    it is not there, no process reads it (no NCCL group yet, or the job ended), or it is not the rank's."""
    return job_access.as_job(rp, lambda: b"1" if job_paths.write_to_pipe(rp, pipe, b"1") else b"", 5.0) == b"1"


def _exchange(rp, pipe: str, dump_file: str, before: float | None, ask: bool, timeout: float) -> bytes:
    """In the child with the job's rights: the dump file's time before (unless known), the request (``ask``),
    then the dump once it is newer than the request: 8 bytes of that time, then the file."""
    deadline = time.monotonic() + timeout
    if ask:
        try:
            before = job_paths.regular_file(rp, dump_file)[0]
        except job_paths.Absent:
            before = None
        try:
            sent = job_paths.write_to_pipe(rp, pipe, b"1")
        except job_paths.Absent:
            sent = False
        if not sent:
            return NO_PIPE
    while True:
        try:
            _, data = job_paths.regular_file(rp, dump_file, newer_than=before, cap=MAX_DUMP_BYTES)
            return struct.pack("!d", -1.0 if before is None else before) + data
        except job_paths.Absent:
            if time.monotonic() >= deadline:
                raise
        time.sleep(POLL_S)


def flight_record(rp, timeout: float) -> dict | None:
    """The rank's flight record dumped on request (``rp.dump_pipe``: its pipe and dump file): the dump file
    once it is newer than the request and reads whole; None when torch did not answer within ``timeout``
    seconds, or what the job named is not its own (job_access notes why), or no pipe was there to ask (noted:
    torch 2.15's nccl2 opens none)."""
    from ..evidence.fr_dumps import parse_dump

    if not rp.dump_pipe:
        return None
    pipe, dump_file = rp.dump_pipe
    deadline = time.monotonic() + timeout
    before, ask = None, True
    while time.monotonic() < deadline:
        left = deadline - time.monotonic()
        got = job_access.as_job(rp, lambda: _exchange(rp, pipe, dump_file, before, ask, left), left,
                                MAX_DUMP_BYTES + 8)
        if got == NO_PIPE:
            job_access.note(rp.rank, NO_PIPE_NOTE.format(pipe=pipe), why=None)
            return None
        if got is None or len(got) < 8:
            return None
        record = parse_dump(got[8:], dump_file)  # a half-written pickle reads as None: read it again
        if record is not None:
            return record
        stamp = struct.unpack("!d", got[:8])[0]
        before, ask = (None if stamp < 0 else stamp), False
        time.sleep(POLL_S)
    return None
