"""attach's engine: pick the job (one on this node, or the one --pid/--job names), read it, judge it, word the
fix, and make the `attach` document. Only reads; ``stop`` (opt-in) ends the job after the verdict."""
from __future__ import annotations

import os
import signal
import socket
from dataclasses import dataclass

from ...errors import NothingReadable, UsageError
from ...exitcodes import ExitCode
from ..evidence import pyspy
from . import discover as disc
from .judge import Category, Verdict, describe, judge
from .sample import RankRead, read_job


@dataclass
class AttachRequest:
    pid: int | None = None
    job: str | None = None
    interval: float = 3.0
    timeout: float = pyspy.TIMEOUT_S
    stop: bool = False


def choose(found: disc.Discovery, request: AttachRequest) -> disc.Job:
    jobs = found.jobs
    if request.job is not None:
        jobs = [j for j in jobs if j.key == request.job or j.key.startswith(request.job)]
        if not jobs:
            raise UsageError(f"--job {request.job!r}: no such job on this node ({_listing(found.jobs) or 'none'})")
    if len(jobs) > 1:
        raise UsageError(f"{len(jobs)} torch.distributed jobs run here; name one with --pid PID or --job KEY: "
                         f"{_listing(jobs)}")
    if not jobs:
        if found.unreadable:
            raise NothingReadable(permission_fix(found.unreadable, "read their environment"))
        raise UsageError("no torch.distributed job runs on this machine (no process with RANK/WORLD_SIZE or a "
                         "launcher's rank variables)" + (f" among --pid {request.pid} and its children"
                                                         if request.pid else ""))
    return jobs[0]


def _listing(jobs: list[disc.Job]) -> str:
    return "; ".join(f"--job {j.key} (ranks {','.join(map(str, sorted(r.rank for r in j.ranks)))}, "
                     f"pid {j.agent_pid or j.ranks[0].pid}: {j.command[:120]})" for j in jobs)


def permission_fix(pids: list[int], what: str = "read their stacks") -> str:
    shown = ", ".join(map(str, pids[:8])) + (" ..." if len(pids) > 8 else "")
    scope = _ptrace_scope()
    hint = (f"; kernel.yama.ptrace_scope is {scope}: `sudo sysctl kernel.yama.ptrace_scope=0` lets the same user "
            f"read them" if scope not in (None, 0) else "")
    return (f"this user may not {what} (process(es) {shown}): run attach as the job's user or as root "
            f"(`sudo -E $(command -v ddpdoctor) attach`), or give py-spy CAP_SYS_PTRACE{hint}; in a container, "
            f"start it with --cap-add SYS_PTRACE")


def _ptrace_scope() -> int | None:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as fh:
            return int(fh.read().strip() or "0")
    except (OSError, ValueError):
        return None


def run(request: AttachRequest) -> dict:
    """The attach document; raises UsageError (exit 2) or NothingReadable (exit 3)."""
    from ... import documents

    found = disc.discover({request.pid} if request.pid else None)
    job = choose(found, request)
    tool = pyspy.binary()
    if tool is None:
        raise UsageError("py-spy is not installed: `pip install py-spy` (attach reads the ranks' stacks with it)")
    reads = read_job(job, interval=request.interval, timeout=request.timeout, tool=tool)
    if not any(r.readable for r in reads):
        denied = [r.pid for r in reads if r.failure is pyspy.DumpFailure.PERMISSION]
        if denied:
            raise NothingReadable(permission_fix(denied))
        raise NothingReadable("no rank could be read: " + "; ".join(f"rank {r.rank}: {r.error}" for r in reads[:4]))
    all_here = _all_here(job)
    verdict = judge(reads, job.world_size, all_here)
    stopped = stop_job(job) if request.stop and verdict.stuck else None
    code = ExitCode.FAIL if verdict.stuck else ExitCode.OK
    return documents.envelope(
        "attach", verdict="fail" if verdict.stuck else "pass", exit_code=int(code),
        host=socket.gethostname(), job=job.to_json(), interval_s=request.interval,
        ranks=[r.to_json() for r in reads], diagnosis=diagnosis(verdict, reads), stopped=stopped)


def _all_here(job: disc.Job) -> bool:
    """Every rank of the world runs on this node: WORLD_SIZE equals the ranks found (one node's job)."""
    return job.world_size is not None and len(job.ranks) == job.world_size


def diagnosis(verdict: Verdict, reads: list[RankRead]) -> dict:
    by_rank = {r.rank: r for r in reads}
    culprits = [_who(by_rank.get(rank), rank) for rank in verdict.culprits]
    return {"category": verdict.category.value, "culprits": culprits, "culprit_named": verdict.culprit_named,
            "waiting": {str(k): v for k, v in sorted(verdict.waiting.items())}, "elsewhere": verdict.elsewhere,
            "reason": verdict.reason, "summary": summary(verdict, by_rank), "fix": fix(verdict, by_rank)}


def _who(read: RankRead | None, rank: int) -> dict:
    if read is None:
        return {"rank": rank, "host": None, "where": None, "function": None, "in": "not read here"}
    return {"rank": rank, "host": read.host, "where": read.where, "function": read.function, "in": describe(read),
            "pid": read.pid}


def _place(read: RankRead | None, rank: int) -> str:
    if read is None:
        return f"rank {rank} (not on this node)"
    at = f" at {read.where}" + (f" ({read.function})" if read.function else "") if read.where else ""
    return f"rank {rank} on {read.host}{at}, in {describe(read)}"


def _others(verdict: Verdict) -> str:
    groups: dict[str, list[int]] = {}
    for rank, what in verdict.waiting.items():
        if rank not in verdict.culprits:
            groups.setdefault(what, []).append(rank)
    return "; ".join(f"rank(s) {','.join(map(str, ranks))} wait in {what}" for what, ranks in groups.items())


def summary(verdict: Verdict, by_rank: dict[int, RankRead]) -> str:
    cat = verdict.category
    places = "; ".join(_place(by_rank.get(r), r) for r in verdict.culprits)
    others = _others(verdict)
    if cat is Category.PROGRESSING:
        return f"the job progresses: {verdict.reason}"
    if cat is Category.HANG and verdict.culprit_named:
        return f"hang: {places} holds the others up" + (f" ({others})" if others else "")
    if cat is Category.DESYNC:
        lead = "desync: " + ("the odd rank(s): " if verdict.culprit_named else "no majority: ")
        return lead + places + (f"; {verdict.reason}" if verdict.reason else "")
    if cat is Category.DEADLOCK:
        return f"deadlock: {places}: {verdict.reason}"
    return f"{cat.value.replace('_', ' ')}: {verdict.reason}" + (f" ({others})" if others else "") + \
        (f"; candidates: {places}" if places else "")


def fix(verdict: Verdict, by_rank: dict[int, RankRead]) -> str:
    cat = verdict.category
    first = by_rank.get(verdict.culprits[0]) if verdict.culprits else None
    at = first.where if first is not None and first.where else "the line above"
    if cat is Category.PROGRESSING:
        return "nothing to do now; run attach again if it stops moving"
    if cat is Category.HANG and verdict.culprit_named:
        return (f"see why rank {verdict.culprits[0]} does not leave {at} (a loop, a blocking read, a rank-dependent "
                f"branch or a slow step): `py-spy dump --locals --pid {first.pid if first else 'PID'}` shows it "
                f"live; every rank must reach the same collectives")
    if cat is Category.HANG:
        return ("run attach on every node of the job (same command with --master HOST:PORT) to read the ranks the "
                "waits lead to")
    if cat is Category.DESYNC:
        return (f"every rank must call the same collectives in the same order: look at {at} for a rank-dependent "
                f"branch or a skipped call")
    if cat is Category.DEADLOCK:
        return ("order the sends and receives so one side sends first (even ranks send, odd receive), or post "
                "both with dist.batch_isend_irecv")
    return ("no rank holds the others up from Python: the transport or a device is stuck (NCCL_DEBUG=INFO, "
            "`ddpdoctor nccl-bench`, the GPUs' state); start jobs with TORCH_NCCL_DEBUG_INFO_PIPE_FILE to read "
            "their flight recorder")


def stop_job(job: disc.Job) -> dict:
    """--stop: SIGTERM to torchrun's agent (it stops its workers), else to every rank; after the verdict."""
    targets = [job.agent_pid] if job.agent_pid else [r.pid for r in job.ranks]
    sent = []
    for pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
            sent.append(pid)
        except OSError:
            continue
    return {"signal": "SIGTERM", "pids": sent}
