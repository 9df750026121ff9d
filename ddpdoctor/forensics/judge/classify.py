"""Classifying one rank's failure: what its records say (exception, traceback, signal, log) mapped to a
shape (failure_words.Shape: its category, oom, cuda, nccl, timeout, desync, peer_lost, signal, exception, ..., and
its fix are that module's words).

The records (``RankFailure``, ``Verdict``), the rules (``RULES``: the first match wins), the exception and
traceback parsing (the user's frame, C++ aborts) and ``classify``. Pure apart from ``oom_evidence`` (the
cgroup's counter). Reading the files is ``postmortem``'s (through ``evidence_io``); choosing the root cause
among the failures is ``attribution``'s.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..evidence import job_files
from ..evidence.model import RankFailure
from .failure_words import Shape, category_of, fix_of

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
# (shape, pattern): the first match wins, so the specific ones come first; each shape's category and fix are
# failure_words.WORDS'. Said by whichever rank says them, before a peer's loss is looked for:
OWN_RULES = [
    (Shape.LAUNCHER_ENV, re.compile(r"environment variable (WORLD_SIZE|RANK|MASTER_ADDR|MASTER_PORT) expected")),
    (Shape.WRONG_DEVICE, re.compile(r"invalid device ordinal", re.I)),
    (Shape.OOM, re.compile(r"CUDA out of memory|OutOfMemoryError", re.I)),
    (Shape.CUDA_ERROR, re.compile(r"CUDA error|CUBLAS_STATUS|cuDNN error", re.I)),
]
# ... and after it (a rank whose collective broke because a peer died also says "timed out" or "NCCL error"):
AFTER_PEER_RULES = [
    (Shape.DESYNC, re.compile(r"collective mismatch|Received data size doesn't match|Detected mismatch between "
                              r"collectives|CollectiveFingerPrint", re.I)),
    # (`Timeout` under re.I already covers "DistBackendError ... timeout"; its `.*` form was quadratic.)
    (Shape.TIMEOUT, re.compile(r"Watchdog caught collective operation timeout|timed out|Timeout", re.I)),
    (Shape.NCCL, re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|"
                            r"NCCL communicator", re.I)),
]
RULES = OWN_RULES + AFTER_PEER_RULES
# What a rank says when a peer went away first: gloo's pair.cc, NCCL's remote errors, the TCPStore's socket.
PEER_LOST = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|remote worker crashing|"
                       r"remote process exited|ncclRemoteError|DistNetworkError|Socket Timeout|recvBytes|"
                       r"Connection refused|ProcessGroupGloo[^\n]{0,60}?(?:closed|reset)", re.I)
# gloo's rendezvous of the ranks (init_process_group) refused: on a restarted attempt, torch's own restart.
MESH_REFUSED = re.compile(r"connectFullMesh failed[^\n]{0,300}?(?:Connection refused|ECONNREFUSED)", re.I)
# argparse's way out (exit 2, no traceback): its usage, then `PROG: error: MESSAGE` as the last line. The usage
# lists the options (`--collective-timeout`), which the text rules would read as a collective's timeout.
ARGPARSE_ERROR = re.compile(r"^(?P<prog>[^\s:]{1,256}): error: (?P<msg>[^\n]{1,2000})$", re.M)
# Exceptions a signal raises in Python: they say the process was stopped, not what went wrong.
STOPPED = ("KeyboardInterrupt", "SignalException", "SystemExit")

# Tracebacks write `File "f", line N, in fn`; faulthandler writes `File "f", line N in fn`.
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
from ..evidence.model import LIBRARY, is_library  # noqa: E402, F401 - the one library-frame rule
# A C++ exception nobody caught: std::terminate prints its type and what(), then SIGABRT.
ABORT = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']{1,512})'[ \t]*\r?\n[ \t]*what\(\):"
                   r"[ \t]*(?P<what>[^\n]*)")


def last_traceback(text: str) -> str:
    """The last `Traceback (most recent call last):` block of a log, up to its exception line."""
    idx = text.rfind("Traceback (most recent call last):")
    if idx < 0:
        return ""
    block = text[idx:].splitlines()
    out = [block[0]]
    for line in block[1:]:
        out.append(line)
        if line and not line.startswith((" ", "\t")):
            break
    return "\n".join(out)


def user_frame(tb: str) -> str | None:
    """file:line of the innermost frame that is not a library's: where the user's code failed."""
    frames = [m for m in FRAME.finditer(tb or "")]
    for m in reversed(frames):
        if not is_library(m["file"]):
            return f"{m['file']}:{m['line']}"
    return f"{frames[-1]['file']}:{frames[-1]['line']}" if frames else None


def fatal_frame(text: str) -> str | None:
    """file:line of the user's innermost frame in faulthandler's "Fatal Python error" dump (innermost first)."""
    idx = (text or "").rfind("Fatal Python error")
    if idx < 0:
        return None
    block = text[idx:].split("\n\n", 2)
    frames = FRAME.findall("\n".join(block[1:3]) if len(block) > 1 else "")
    for file, line, _ in frames:
        if not is_library(file):
            return f"{file}:{line}"
    return None


def exception_line(message: str, tb: str) -> tuple[str | None, str | None]:
    """('ValueError', 'bad shape') from an error file's message or a traceback's last line (linear: see
    job_files.exception_line)."""
    return job_files.exception_line(message, tb)


def oom_evidence(events: Path = Path("/sys/fs/cgroup/memory.events")) -> str:
    """The cgroup's OOM-kill counter, where readable: the usual sender of a SIGKILL nobody asked for."""
    try:
        fields = dict(line.split() for line in events.read_text().splitlines() if line.strip())
    except (OSError, ValueError):
        return ""
    kills = int(fields.get("oom_kill", "0") or 0)
    return f"; this cgroup's memory.events counts {kills} OOM kill(s)" if kills else ""


def classify(f: RankFailure) -> RankFailure:
    """Decided by what the failure says before how it ended: a rank whose own exception is in its records
    failed of it even if a signal ended it later, and a rank that reports a peer's transport error (or died of
    SIGABRT right after one) is a consequence of that peer."""
    text = "\n".join(x for x in (f.message or "", f.traceback, f.log_tail) if x)
    said = _own_error(f)
    if f.exit_code is not None and f.exit_code < 0:
        sig = -f.exit_code
        f.signal = SIGNALS.get(sig, f"signal {sig}")
        if said and not PEER_LOST.search(said) and f.error_type not in STOPPED:
            return _by_text(f, said)  # e.g. the InjectedFailure of a rank the launcher then SIGTERMed
        if PEER_LOST.search(text) and sig != 9:
            return _peer_lost(f, "its collective broke because a peer process died, then it ended with "
                                 f"{f.signal}")
        abort = ABORT.search(text) if sig == 6 else None
        if abort:
            return _aborted(f, abort, text)
        return _by_signal(f, sig)
    if f.error_type in STOPPED:
        f.victim, f.reason = True, f"stopped ({f.error_type})"
        return _shaped(f, Shape.STOPPED)
    rejected = _argparse_error(f) if f.exit_code == 2 and not said else None
    if rejected:
        f.error_type, f.message = "usage", rejected["msg"]
        return _shaped(f, Shape.USAGE, prog=rejected["prog"])
    return _by_text(f, said or text)


def _argparse_error(f: RankFailure) -> re.Match | None:
    """The script's argument parser refused its arguments: the last `PROG: error:` line after a usage."""
    tail = f.log_tail or ""
    if "usage:" not in tail:
        return None
    matches = list(ARGPARSE_ERROR.finditer(tail))
    return matches[-1] if matches else None


def _own_error(f: RankFailure) -> str:
    """The rank's own final error: its error message and the last traceback (not the whole log tail)."""
    tb = f.traceback or last_traceback(f.log_tail)
    return "\n".join(x for x in (f.message or "", tb.strip().splitlines()[-1] if tb.strip() else "") if x)


def _shaped(f: RankFailure, shape: Shape, **fields: str) -> RankFailure:
    """The rank's failure has this shape: its category and its fix from failure_words."""
    f.category, f.fix = category_of(shape), fix_of(shape, **fields)
    return f


def _peer_lost(f: RankFailure, reason: str) -> RankFailure:
    f.victim, f.reason = True, reason
    return _shaped(f, Shape.PEER_LOST)


def _aborted(f: RankFailure, abort: re.Match, text: str) -> RankFailure:
    """SIGABRT after an uncaught C++ exception: its type and what() say what went wrong."""
    f.error_type, f.message = abort["type"].rsplit("::", 1)[-1], abort["what"].strip()
    f.location = f.location or fatal_frame(text)
    _by_text(f, f.message)
    if f.category in ("exception", "unknown"):
        _shaped(f, Shape.ABORTED, type=abort["type"], at=f" at {f.location}" if f.location else "")
    return f


def _by_signal(f: RankFailure, sig: int) -> RankFailure:
    if sig in (2, 15):
        f.victim, f.reason = True, f"stopped by the launcher ({f.signal}) after another rank failed"
        return _shaped(f, Shape.LAUNCHER_STOP)
    if sig == 9:
        f.message = f.message or f"killed by SIGKILL (signal 9){oom_evidence()}"
        return _shaped(f, Shape.SIGKILL)
    f.message = f.message or f"killed by {f.signal}"
    return _shaped(f, Shape.SIGNAL, signal=f.signal)


def _by_text(f: RankFailure, text: str) -> RankFailure:
    for shape, pattern in OWN_RULES:  # launcher env, CUDA, OOM: real on whichever rank says them
        if pattern.search(text):
            return _nccl_detail(_shaped(f, shape), text)
    if MESH_REFUSED.search(text):
        f.reason = ("torch's restart: the ranks of the new attempt could not connect" if f.attempt > 0
                    else "the ranks could not connect to each other")
        return _shaped(f, Shape.RESTART_CONNECT if f.attempt > 0 else Shape.CONNECT)
    if PEER_LOST.search(text):
        return _peer_lost(f, "its collective broke because a peer process died")
    for shape, pattern in AFTER_PEER_RULES:
        if pattern.search(text):
            _shaped(f, shape)
            break
    if f.category == "timeout":
        f.reason = "waited in a collective for a rank that never came"
    elif f.category == "unknown" and (f.message or f.traceback):
        what = f.error_type or "the exception"
        if f.location:
            _shaped(f, Shape.EXCEPTION_AT, what=what, location=f.location)
        else:
            _shaped(f, Shape.EXCEPTION, what=what)
    return _nccl_detail(f, text)


def _nccl_detail(f: RankFailure, text: str) -> RankFailure:
    if f.category == "nccl":
        full = "\n".join(x for x in (text, f.log_tail) if x)
        warn = next((ln.strip() for ln in full.splitlines() if "NCCL WARN" in ln), None)
        if warn:
            f.message = f"{f.message or ''} — first: {warn}".strip(" —")
    return f


# The torch.distributed call a traceback waited in, by its function name in distributed_c10d.py.
C10D_FILE = "torch/distributed/distributed_c10d.py"


def waited_call(f: RankFailure) -> tuple[str, str | None]:
    """(torch.distributed function, the user's file:line) a timed-out rank was in, from its traceback."""
    from ..evidence.library_waits import library_wait, outside_handlers
    from ..evidence.stacks import traceback_frames

    frames = outside_handlers(traceback_frames(f.traceback))  # innermost first; a signal handler's call dropped
    op = next((x.function for x in reversed(frames) if C10D_FILE in x.file), None)  # the call the user made
    lib = library_wait(frames)  # raised inside a library's wait: certain, whatever its row
    if lib is not None:
        op = f"{lib.phrase} ({op})" if op and op != lib.op else lib.phrase
    where = next((x.where for x in frames if not is_library(x.file)), None)
    return op or "a collective", where or f.location


def stopped_in_own_code(f: RankFailure) -> bool:
    """Its traceback runs through a library's signal handler (Lightning broadcasts the launcher's SIGTERM from
    whatever frame it interrupted), and under it the rank stood in its own code: stopped, not waiting."""
    from ..evidence.library_waits import in_handler
    from ..evidence.stacks import traceback_frames

    frames = traceback_frames(f.traceback)
    return in_handler(frames) and waited_call(f)[0] == "a collective"
