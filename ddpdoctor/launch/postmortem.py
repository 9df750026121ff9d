"""Post-mortem of a torchrun job: which rank failed first, on which host, why, and what to do.

Sources, all written by torch itself: the agent's failure summary (rank, host, exit code, error file),
every rank's error.json (@record: exception, traceback, timestamp) and its stderr log. The root cause is the
earliest real failure; ranks the agent stopped (SIGTERM) and ranks whose collective broke because a peer
died or timed out are consequences, listed as such.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import evidence_io

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
TAIL_LINES = 40

# (category, pattern, fix); the first match wins, so the specific ones come first.
RULES = [
    ("launcher_env", re.compile(r"environment variable (WORLD_SIZE|RANK|MASTER_ADDR|MASTER_PORT) expected"),
     "launch with torchrun (or `ddpdoctor run-trainer`), which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT"),
    ("cuda", re.compile(r"invalid device ordinal", re.I),
     "use LOCAL_RANK, not RANK, for the device: torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"),
    ("oom", re.compile(r"CUDA out of memory|OutOfMemoryError", re.I),
     "reduce the micro-batch size (raise gradient accumulation to keep the global batch), or use activation checkpointing"),
    ("cuda", re.compile(r"CUDA error|CUBLAS_STATUS|cuDNN error", re.I),
     "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; check `ddpdoctor preflight --only gpu,gpu-health` on that host"),
    ("desync", re.compile(r"collective mismatch|Received data size doesn't match|Detected mismatch between "
                          r"collectives|CollectiveFingerPrint", re.I),
     "the ranks called different collectives (or other shapes or dtypes) at the same point: make every rank issue "
     "the same collectives in the same order with the same shapes (TORCH_DISTRIBUTED_DEBUG=DETAIL names both)"),
    # (`Timeout` under re.I already covers "DistBackendError ... timeout"; its `.*` form was quadratic.)
    ("timeout", re.compile(r"Watchdog caught collective operation timeout|timed out|Timeout", re.I),
     "a rank stopped participating in a collective: rerun under `ddpdoctor run-trainer` (it collects every rank's "
     "stack before your process group's timeout expires) to get the rank behind; raise the process-group timeout "
     "only if the work is legitimately slow"),
    ("nccl", re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|NCCL communicator", re.I),
     "run `ddpdoctor preflight` across the nodes and `ddpdoctor nccl-bench`; rerun with NCCL_DEBUG=INFO for the first NCCL WARN"),
]
# What a rank says when a peer went away first: gloo's pair.cc, NCCL's remote errors, the TCPStore's socket.
PEER_LOST = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|remote worker crashing|"
                       r"remote process exited|ncclRemoteError|DistNetworkError|Socket Timeout|recvBytes|"
                       r"Connection refused|ProcessGroupGloo[^\n]{0,60}?(?:closed|reset)", re.I)
# Exceptions a signal raises in Python: they say the process was stopped, not what went wrong.
STOPPED = ("KeyboardInterrupt", "SignalException", "SystemExit")


@dataclass
class RankFailure:
    rank: int | None
    local_rank: int | None
    host: str | None
    exit_code: int | None
    signal: str | None = None
    attempt: int = 0
    timestamp: float | None = None
    category: str = "unknown"
    error_type: str | None = None
    message: str | None = None
    location: str | None = None
    fix: str = ""
    traceback: str = ""
    log_tail: str = ""
    victim: bool = False
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Verdict:
    root_cause: RankFailure | None
    consequences: list[RankFailure] = field(default_factory=list)
    attempts: list[dict] = field(default_factory=list)


# ---------------------------------------------------------------- reading torch's records
# Line breaks as [ \t]*\r?\n[ \t]*, never \s*\n\s* (both \s* can take the newlines: quadratic on a run of blank
# lines); numbers at most 9 digits (int() of a 10 MB digit string is an error, not a rank).
_NL = r"[ \t]*\r?\n[ \t]*"
SUMMARY_BLOCK = re.compile(
    rf"\[\d{{1,9}}\]:{_NL}time[ \t]*:[ \t]*(?P<time>\S+){_NL}host[ \t]*:[ \t]*(?P<host>\S+){_NL}rank[ \t]*:[ \t]*"
    rf"(?P<rank>-?\d{{1,9}})[ \t]*\(local_rank:[ \t]*(?P<local>-?\d{{1,9}})\)[^\n]*\n[ \t]*exitcode[ \t]*:[ \t]*"
    rf"(?P<code>-?\d{{1,9}})[^\n]*\n[ \t]*error_file[ \t]*:[ \t]*(?P<file>[^\n]+)")


def parse_agent_summary(text: str) -> list[dict]:
    """torchrun's ChildFailedError table: one dict per failed rank."""
    out = []
    for m in SUMMARY_BLOCK.finditer(text or ""):
        out.append({"time": m["time"], "host": m["host"], "rank": int(m["rank"]), "local_rank": int(m["local"]),
                    "exit_code": int(m["code"]), "error_file": m["file"].strip()})
    return out


def read_error_file(path: Path) -> dict | None:
    """torch's error file, read under evidence_io's bounds (size, regular file, shape)."""
    return evidence_io.read_error_file(path)


def tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = evidence_io.STDERR_TAIL_BYTES) -> str:
    """The last lines of a log, reading at most its last ``max_bytes`` (a rank's log can be gigabytes)."""
    text = RANK_PREFIX.sub("", evidence_io.read_tail(path, max_bytes))
    return "\n".join(text.splitlines()[-lines:])


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


def _float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- judging one rank
# Tracebacks write `File "f", line N, in fn`; faulthandler writes `File "f", line N in fn`.
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]: ?", re.M)  # torch prefixes every worker line with its rank
LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "torch/distributed/elastic", "<frozen ",
           "ddpdoctor/launch/bootstrap.py")
# A C++ exception nobody caught: std::terminate prints its type and what(), then SIGABRT.
ABORT = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']{1,512})'[ \t]*\r?\n[ \t]*what\(\):"
                   r"[ \t]*(?P<what>[^\n]*)")


def user_frame(tb: str) -> str | None:
    """file:line of the innermost frame that is not a library's: where the user's code failed."""
    frames = [m for m in FRAME.finditer(tb or "")]
    for m in reversed(frames):
        if not any(part in m["file"] for part in LIBRARY):
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
        if not any(part in file for part in LIBRARY):
            return f"{file}:{line}"
    return None


def exception_line(message: str, tb: str) -> tuple[str | None, str | None]:
    """('ValueError', 'bad shape') from an error file's message or a traceback's last line (linear: see
    evidence_io.exception_line)."""
    return evidence_io.exception_line(message, tb)


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
        f.category, f.victim, f.reason = "stopped", True, f"stopped ({f.error_type})"
        f.fix = "nothing to fix on this rank: see the root cause"
        return f
    return _by_text(f, said or text)


def _own_error(f: RankFailure) -> str:
    """The rank's own final error: its error message and the last traceback (not the whole log tail)."""
    tb = f.traceback or last_traceback(f.log_tail)
    return "\n".join(x for x in (f.message or "", tb.strip().splitlines()[-1] if tb.strip() else "") if x)


def _peer_lost(f: RankFailure, reason: str) -> RankFailure:
    f.category, f.victim, f.reason = "peer_lost", True, reason
    f.fix = "nothing to fix on this rank: see the root cause"
    return f


def _aborted(f: RankFailure, abort: re.Match, text: str) -> RankFailure:
    """SIGABRT after an uncaught C++ exception: its type and what() say what went wrong."""
    f.error_type, f.message = abort["type"].rsplit("::", 1)[-1], abort["what"].strip()
    f.location = f.location or fatal_frame(text)
    _by_text(f, f.message)
    if f.category in ("exception", "unknown"):
        f.category = "signal"
        f.fix = (f"the process aborted on an uncaught C++ {abort['type']}"
                 + (f" at {f.location}" if f.location else "") + ": see its what() message")
    return f


def _by_signal(f: RankFailure, sig: int) -> RankFailure:
    f.category = "signal"
    if sig in (2, 15):
        f.victim, f.reason = True, f"stopped by the launcher ({f.signal}) after another rank failed"
        f.fix = "nothing to fix on this rank: see the root cause"
    elif sig == 9:
        f.message = f.message or f"killed by SIGKILL (signal 9){oom_evidence()}"
        f.fix = ("killed with SIGKILL: usually the kernel OOM killer or the scheduler; check `dmesg | grep -i -e oom "
                 "-e killed` and the job's memory limit, lower the batch size or the DataLoader workers")
    else:
        f.message = f.message or f"killed by {f.signal}"
        f.fix = f"the process died of {f.signal}: its stderr log above shows the last Python stack (PYTHONFAULTHANDLER)"
    return f


def _by_text(f: RankFailure, text: str) -> RankFailure:
    for category, pattern, fix in RULES[:4]:  # launcher env, CUDA, OOM: real on whichever rank says them
        if pattern.search(text):
            f.category, f.fix = category, fix
            return _nccl_detail(f, text)
    if PEER_LOST.search(text):
        return _peer_lost(f, "its collective broke because a peer process died")
    for category, pattern, fix in RULES[4:]:
        if pattern.search(text):
            f.category, f.fix = category, fix
            break
    if f.category == "timeout":
        f.reason = "waited in a collective for a rank that never came"
    elif f.category == "unknown" and (f.message or f.traceback):
        f.category = "exception"
        what = f.error_type or "the exception"
        f.fix = (f"{what} raised at {f.location} ended this rank: correct the code there (the traceback shows how it "
                 "got there)" if f.location else f"{what} ended this rank: its traceback shows where")
    return _nccl_detail(f, text)


def _nccl_detail(f: RankFailure, text: str) -> RankFailure:
    if f.category == "nccl":
        full = "\n".join(x for x in (text, f.log_tail) if x)
        warn = next((ln.strip() for ln in full.splitlines() if "NCCL WARN" in ln), None)
        if warn:
            f.message = f"{f.message or ''} — first: {warn}".strip(" —")
    return f


def failure_from(record: dict, attempt: int, rank_dir: Path | None) -> RankFailure:
    err = read_error_file(Path(record["error_file"])) if record.get("error_file") not in (None, "", "<N/A>") else None
    long = tail(rank_dir / "stderr.log", 400) if rank_dir else ""  # a torch traceback is often 40+ lines
    log = "\n".join(long.splitlines()[-TAIL_LINES:])
    tb = (err or {}).get("traceback") or last_traceback(long)
    message = (err or {}).get("message") or (tb.strip().splitlines()[-1] if tb.strip() else None)
    etype, emsg = exception_line(message or "", tb)
    f = RankFailure(rank=record.get("rank"), local_rank=record.get("local_rank"), host=record.get("host"),
                    exit_code=record.get("exit_code"), attempt=attempt, timestamp=(err or {}).get("timestamp"),
                    error_type=etype, message=emsg if etype else message, location=user_frame(tb),
                    traceback=tb, log_tail=log)
    return classify(f)


# ---------------------------------------------------------------- the job
def attempts(logs: Path) -> list[Path]:
    """torchrun writes <log_dir>/<run id>_<random>/attempt_<k>/<local_rank>/; newest run first (a folder
    that is not attempt_<number>, such as attempt_final, is skipped with a note)."""
    runs = sorted(evidence_io.subdirs(logs), key=evidence_io.mtime)
    if not runs:
        return []
    tries = [d for d in evidence_io.subdirs(runs[-1]) if d.name.startswith("attempt_")]
    return [d for _, d in evidence_io.numbered(tries, "attempt_")]


def failures_of_attempt(attempt_dir: Path, attempt: int, host: str, summary: list[dict] | None) -> list[RankFailure]:
    """Failures of one attempt: from the agent's table when it has one, else from the error files left behind."""
    out = []
    if summary:
        for rec in summary:
            out.append(failure_from(rec, attempt, attempt_dir / str(rec["local_rank"])))
        return out
    for _, rank_dir in evidence_io.numbered(evidence_io.subdirs(attempt_dir)):  # `x`: skipped with a note
        err = rank_dir / "error.json"
        tb = last_traceback(tail(rank_dir / "stderr.log", 200))
        if err.exists() or tb:
            rec = {"rank": global_rank_of(rank_dir), "local_rank": int(rank_dir.name), "host": host, "exit_code": 1,
                   "error_file": str(err) if err.exists() else None}
            out.append(failure_from(rec, attempt, rank_dir))
    return out


def global_rank_of(rank_dir: Path) -> int | None:
    """torch prefixes a worker's traceback lines with its global rank: `[rank5]: ...`."""
    m = re.search(r"^\[rank(\d{1,9})\]:", evidence_io.read_tail(rank_dir / "stderr.log"), re.M)
    return int(m.group(1)) if m else None


def other_nodes(logs: Path) -> list[tuple[str, Path]]:
    """With a shared --run-dir every node's logs sit side by side: (host, latest attempt dir) of the others."""
    out = []
    for node_dir in sorted(p for p in evidence_io.subdirs(logs.parent) if p != logs):
        tries = attempts(node_dir)
        if tries:
            out.append((node_dir.name.rsplit("-", 2)[0], tries[-1]))  # <host>-<addr>-<pid>
    return out


def judge(failures: list[RankFailure]) -> tuple[RankFailure | None, list[RankFailure]]:
    """Root cause: the earliest failure that is not a consequence; everything else is a consequence."""
    if not failures:
        return None, []
    real = [f for f in failures if not f.victim]
    # A collective timeout is a consequence when anything else went wrong first.
    primary = [f for f in real if f.category != "timeout"] or real or failures
    root = min(primary, key=lambda f: (f.timestamp if f.timestamp is not None else float("inf"), f.rank or 0))
    rest = []
    for f in failures:
        if f is root:
            continue
        if not f.reason:
            f.reason = "failed after the root cause"
        f.victim = True
        rest.append(f)
    return root, rest


def analyse(logs: Path, agent_stderr: str, host: str) -> Verdict:
    dirs = attempts(logs)
    summary = parse_agent_summary(agent_stderr)
    verdict = Verdict(root_cause=None)
    for i, d in enumerate(dirs):
        last = i == len(dirs) - 1
        fails = failures_of_attempt(d, i, host, summary if last else None)
        if last and fails and all(f.victim for f in fails):
            # Every local rank is a consequence: the cause is on another node. Read its records when the
            # run dir is shared (the post-mortem then names the same root cause on every node).
            for other_host, other in other_nodes(logs):
                fails += failures_of_attempt(other, i, other_host, None)
        from . import attribution  # reads this module's records: imported here, not at the top

        attribution.refine_timeouts(fails)
        root, rest = attribution.blame_the_absent(*judge(fails), d, host)
        verdict.attempts.append({"attempt": i, "root_cause": root.to_json() if root else None,
                                 "consequences": [f.to_json() for f in rest]})
        if last:
            verdict.root_cause, verdict.consequences = root, rest
    return verdict


# A timeout or a transport error says which rank gave up, not which rank the others waited for.
HANG_SHAPED = ("timeout", "nccl", "unknown", "consequence")


def adopt_hang_verdict(verdict: Verdict, hang: dict | None) -> None:
    """When flight-recorder dumps name the rank(s) a hung collective waited for (or the rank whose call differs
    from the majority's), that rank is the root cause of a job whose first failure only says who gave up; the
    judgement is attribution.adopt's."""
    from . import attribution

    attribution.adopt(verdict, hang)
