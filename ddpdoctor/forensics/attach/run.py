"""attach's engine: pick the job (one on this node, or the one --pid/--job names), read it, judge it, word the
fix, and make the `attach` document. Only reads; ``stop`` (opt-in) ends the job after the verdict."""
from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from ...errors import NothingReadable, UsageError
from ..evidence import nccl_ras, pyspy, user_code
from . import discover as disc
from . import job_access
from .decide import decide, outcome_of, undecided, undecided_here
from .sample import read_job


@dataclass
class AttachRequest:
    pid: int | None = None
    job: str | None = None
    interval: float = 3.0
    timeout: float = pyspy.TIMEOUT_S
    stop: bool = False
    wait: float = 30.0  # nothing moved but a rank computes: watch up to this long in all, then say it as it is
    progress: Callable[[str], None] | None = None  # one line per step of the sampling (the CLI shows it)
    # several nodes: where they meet, as preflight's flags (the launcher's values fill what is not given)
    master: str | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    local_addr: str | None = None
    token: str | None = None
    meet_timeout: float = 60.0

    @property
    def several_nodes(self) -> bool:
        return bool(self.master) or (self.nnodes or 1) > 1


def choose(found: disc.Discovery, request: AttachRequest) -> disc.Job:
    jobs = found.jobs
    if request.job is not None:
        jobs = [j for j in jobs if j.key == request.job or j.key.startswith(request.job)]
        if not jobs:
            raise UsageError(f"--job {request.job!r}: no such job on this node ({_listing(found.jobs) or 'none'})")
    shared = sorted({j.key for j in jobs if sum(k.key == j.key for k in jobs) > 1})
    if shared:  # a run id is the job's own word: another user's job (or another launch) may copy it
        raise UsageError(f"{len(jobs)} jobs share the key {', '.join(shared)} (different users or launcher trees: "
                         f"never merged); name one with --pid PID: {_listing(jobs, by_pid=True)}")
    if len(jobs) > 1:
        raise UsageError(f"{len(jobs)} torch.distributed jobs run here; name one with --pid PID or --job KEY: "
                         f"{_listing(jobs)}")
    if not jobs:
        if found.unreadable:
            raise NothingReadable(permission_fix(found.unreadable, "read their environment"))
        among = f" among --pid {request.pid} and its children" if request.pid else ""
        raise UsageError("no torch.distributed job runs on this machine (no process with RANK/WORLD_SIZE, a "
                         "launcher's rank variables or Ray Train's record of its rank)" + among + _unranked(found))
    return jobs[0]


def _unranked(found: disc.Discovery) -> str:
    """Ray Train workers seen with no record of their rank: say why rather than "no job" alone."""
    if not found.unranked:
        return ""
    shown = ", ".join(map(str, found.unranked[:8])) + (" ..." if len(found.unranked) > 8 else "")
    return (f"; Ray Train worker(s) {shown} keep no record of their rank yet: their process group is not set up, "
            f"or the job runs Ray Train v1 (RAY_TRAIN_V2_ENABLED=0) or RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING=0, "
            f"which keep none (launchers/ray.py)")


def _listing(jobs: list[disc.Job], by_pid: bool = False) -> str:
    def one(j: disc.Job) -> str:
        ranks = ",".join(map(str, sorted(r.rank for r in j.ranks)))
        head = f"--pid {j.root_pid} (job {j.key}, " if by_pid else f"--job {j.key} ("
        return f"{head}user {j.user or j.uid}, ranks {ranks}, pid {j.root_pid}: {j.command[:120]})"
    return "; ".join(one(j) for j in jobs)


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
    say = request.progress or (lambda text: None)
    say(f"job {job.key} ({job.launcher or 'no launcher'}): {len(job.ranks)} rank(s) here")
    if job.ranks:
        user_code.declare(*job.ranks[0].entry)  # its own package is the user's code, wherever installed
    started = time.monotonic()
    reads = read(job, request, tool)
    watched = time.monotonic() - started
    if not any(r.readable for r in reads):
        denied = [r.pid for r in reads if r.failure is pyspy.DumpFailure.PERMISSION]
        if denied:
            raise NothingReadable(permission_fix(denied))
        raise NothingReadable("no rank could be read: " + "; ".join(f"rank {r.rank}: {r.error}" for r in reads[:4]))
    diagnosis = decide(reads, job.world_size, watched_s=watched if request.interval > 0 else None)
    outcome = outcome_of(diagnosis)
    if outcome.verdict == "fail":
        add_ras(diagnosis, reads)
    stopped = stop_job(job) if request.stop and outcome.verdict == "fail" else None
    return documents.envelope(
        "attach", verdict=outcome.verdict, exit_code=outcome.exit_code(),
        host=socket.gethostname(), job=job.to_json(), interval_s=request.interval, watched_s=round(watched, 1),
        ranks=[r.to_json() for r in reads], diagnosis=diagnosis, outcome=outcome.to_json(), stopped=stopped,
        notes=job_access.take_notes())


def add_ras(diagnosis: dict, reads: list, world: int | None = None) -> None:
    """A hang's diagnosis gets NCCL RAS's view (``ras``: fused with the culprits, or why it was not asked) where
    the ranks' flight records show NCCL; asked once, here (one ncclras answers for every node of the job's
    communicators: the multi-node master asks it for all)."""
    ras = nccl_ras.consult({r.rank: r.recorded.raw.get("fr") for r in reads if r.recorded},
                           [c["rank"] for c in diagnosis.get("culprits") or [] if isinstance(c, dict)], world=world)
    if ras is not None:
        diagnosis["ras"] = ras


def read(job: disc.Job, request: AttachRequest, tool: str | None = None, *, one_of_several: bool = False) -> list:
    """The job's ranks here, sampled over the interval, watched up to --wait while the rounds cannot tell (a
    node of several watches while one of its own ranks computes and none went through a wait)."""
    return read_job(job, interval=request.interval, timeout=request.timeout, tool=tool, watch=request.wait,
                    undecided=undecided_here if one_of_several else undecided, progress=request.progress)


def stop_job(job: disc.Job) -> dict:
    """--stop: SIGTERM to torchrun's agents (they stop their workers), else to every rank; after the verdict,
    and only to a process that is still the one discovered (same create time: not a reused pid) and of the
    job's own user."""
    targets = job.agents or [(r.pid, r.started) for r in job.ranks]
    sent = []
    for pid, started in targets:
        try:
            proc = psutil.Process(pid)
            if started is None or proc.create_time() != started or proc.uids().effective != job.uid:
                continue
            proc.send_signal(signal.SIGTERM)
            sent.append(pid)
        except psutil.Error:
            continue
    return {"signal": "SIGTERM", "pids": sent}


def read_here(request: AttachRequest):
    """This node's part: (the job's json or None, its ranks read, a note when there is none)."""
    found = disc.discover({request.pid} if request.pid else None)
    try:
        job = choose(found, request)
    except (UsageError, NothingReadable) as exc:
        return None, [], str(exc)
    return job.to_json(), read(job, request, one_of_several=True), ""


def run_nodes(request: AttachRequest) -> dict | None:
    """Every node runs this; they meet as preflight's nodes do (cluster.join), each node's ranks travel as one
    check's facts, the master judges them all. None: a second process of this node (local rank > 0)."""
    from ...cluster import join
    from ...preflight import PreflightRequest
    from ...registry import LoadedCheck
    from ...runner import Plan
    from ...settings import resolve_run
    from . import nodes

    # torch's TCPStore client logs every failed connect with a C++ backtrace (ERROR level) before it raises: a
    # master that is not ddpdoctor's (an HTTP server, junk, closed) must read as the one error line the engine
    # words, so c10d is silenced in this process below FATAL. Set before torch loads (it reads it then); a
    # user's own value (set for their jobs, carried by `sudo -E`) is not attach's.
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    preq = PreflightRequest(master=request.master, nnodes=request.nnodes, node_rank=request.node_rank,
                            local_addr=request.local_addr, token=request.token, timeout=request.meet_timeout,
                            node_command="ddpdoctor attach --master HOST:PORT")
    here: dict = {}  # this node's part, kept: a worker's document counts the ranks it sent to the master

    def read_and_keep():
        here["part"] = read_here(request)
        return here["part"]

    check = nodes.RanksCheck(read_and_keep)
    check.timeout_s = max(request.interval, request.wait) + 2 * request.timeout + 30
    plan = Plan([LoadedCheck(check, "ddpdoctor", "ddpdoctor.forensics.attach.nodes:RanksCheck")], {nodes.CHECK: {}},
                resolve_run({}, {"timeout": request.meet_timeout, "nnodes": request.nnodes}))
    doc = join.run_cluster(plan, preq, preq.launcher())
    if doc is None:
        return None
    return cluster_doc(doc, request, sent=len((here.get("part") or (None, []))[1]))


def cluster_doc(doc: dict, request: AttachRequest, sent: int | None = None) -> dict:
    """The attach document of a cluster run: the master's with every node's ranks and the one verdict; a
    worker's with its own ranks (``sent``: how many it read and sent to the master, which keeps them) and where
    the master's verdict is."""
    from ... import documents
    from . import nodes

    reads, job, empty = nodes.reads_of(doc)
    notes = nodes.notes_of(doc)
    if doc.get("role") == "worker":
        own = ((doc.get("nodes") or {}).get(doc.get("this_node")) or {}).get("facts", {}).get(nodes.CHECK) or {}
        mine = [r for r in (nodes.from_fact(f, str(doc.get("this_node"))) for f in own.get("ranks") or []) if r]
        return _with_auth(documents.envelope(
            "attach", run_id=doc.get("run_id"), verdict=doc.get("verdict", "pass"),
            exit_code=int(doc.get("exit_code", 0)), role="worker", host=socket.gethostname(), job=job or None,
            interval_s=request.interval, ranks=[r.to_json() for r in mine], master=request.master,
            ranks_sent=len(mine) if sent is None else max(sent, len(mine)),
            diagnosis={"category": "worker", "summary": "the master prints the verdict", "fix": ""}, stopped=None,
            notes=notes), doc)
    world = nodes.parse_world(job, reads)
    if job:
        read_ranks = {r.rank for r in reads}
        job = dict(job, ranks_here=sorted(read_ranks),
                   ranks_elsewhere=[r for r in range(world or 0) if r not in read_ranks])
    watched = nodes.watched_of(doc)
    diagnosis = decide(reads, world, watched_s=watched if request.interval > 0 else None) if reads else {
        "category": "no_job", "summary": "no node runs a rank of the job", "fix": "run attach where the job runs",
        "culprits": []}
    diagnosis["nodes_without_ranks"] = empty
    outcome = outcome_of(diagnosis)
    if outcome.verdict == "fail" and reads:  # as one node's attach does: RAS fused with the whole job's verdict
        add_ras(diagnosis, reads, world)
    return _with_auth(documents.envelope(
        "attach", run_id=doc.get("run_id"), verdict=outcome.verdict, exit_code=outcome.exit_code(), role="master",
        host=socket.gethostname(), job=job or None, interval_s=request.interval, nodes=sorted((doc.get("nodes") or {})),
        ranks=[r.to_json() for r in reads], diagnosis=diagnosis, outcome=outcome.to_json(), stopped=None,
        notes=notes), doc)


def _with_auth(attach_doc: dict, cluster: dict) -> dict:
    """How the nodes' messages were protected (the cluster run's ``auth``): the terminal, --json and attach.json
    say NOT AUTHENTICATED or NOT VERIFIED as preflight's do. Added after the envelope: these are the tool's own
    words (its redaction would take `--token was given` for a flag and its value)."""
    if isinstance(cluster.get("auth"), dict):
        attach_doc["auth"] = cluster["auth"]
    return attach_doc
