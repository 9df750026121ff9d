"""The typed launch configuration of run-trainer: parsed from flags (mirrored by DDPDOCTOR_* env vars), then validated."""
from __future__ import annotations

import hashlib
import math
import os
import re
import secrets
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..inputs import check_run_id
from ..launchers import RUN_JOB_ID_VARS
from ..numbers import parse_int

REFERENCE_MODULE = "ddpdoctor_trainer.train"
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
SCHEDULER_IDS = ("DDPDOCTOR_RUN_ID", *RUN_JOB_ID_VARS)
# Files that only the workers or the end of a run write: an earlier invocation left them, never this one.
RECORDS = ("run.json", "metrics", "snapshots", "checksums.jsonl", "DONE", "stacks", "flight_recorder", "hang")
HANG_TIMEOUT_MAX = 7 * 86400.0


@dataclass
class TrainerConfig:
    nnodes: int = 1
    nproc_per_node: int = 1
    master: str | None = None  # HOST:PORT of the c10d rendezvous (torchrun --rdzv-endpoint)
    local_addr: str | None = None
    max_restarts: int = 0
    run_dir: str = "ddpdoctor-results"  # cli.common.RESULTS_DIR: one folder per run id for every command
    run_id: str | None = None  # --rdzv-id, else the scheduler's job id, else new (see resolve_run_id)
    resume: str | None = None  # --resume RUN_ID | latest
    resume_from: str | None = None  # the earlier run's snapshot --resume picked
    hang_timeout: float | None = None
    # Ranks waiting on a busy one (judge.policy) are stopped past this bound (None: the process group's timeout)
    busy_timeout: float | None = None
    preflight: str = "ran"  # ran | skipped | forced
    preflight_args: list[str] = field(default_factory=list)
    script: str | None = None  # None (and no module): the reference trainer (python -m ddpdoctor_trainer.train)
    script_args: list[str] = field(default_factory=list)
    module: str | None = None  # `-- -m package.module args`: the user's code as a module
    omp_threads: int | None = None
    env: dict = field(default_factory=dict)  # extra env for the workers (interfaces found by preflight)
    standalone_endpoint: str | None = None  # one node, no --master: a free local port, chosen once

    @property
    def is_reference(self) -> bool:
        return self.script is None and self.module is None

    def shown_script(self) -> str:
        """The program as torchrun would name it had it run it directly: the script, the module or the trainer's."""
        return self.module or self.script or REFERENCE_MODULE

    def endpoint(self) -> str:
        return self.master or self.standalone_endpoint or "127.0.0.1:29500"

    def rendezvous_id(self) -> str:
        return self.run_id or derived_id(self)

    def records(self) -> Path:
        """This invocation's own directory: logs, metrics, snapshots, stacks, run.json."""
        return Path(self.run_dir) / self.rendezvous_id()

    def data_dir(self) -> Path:
        # Shared by every run under --run-dir (the corpus is identical); a dot name never collides with a run id.
        return Path(self.run_dir) / ".data"

    def to_json(self) -> dict:
        # What run.json stores: secrets in the user's arguments redacted (the processes get the real ones).
        from ..redaction import redact_argv, redact_env

        return {**asdict(self), "script_args": redact_argv(self.script_args),
                "preflight_args": redact_argv(self.preflight_args), "env": redact_env(self.env)}


def validate(cfg: TrainerConfig) -> TrainerConfig:
    if cfg.nnodes > 1 and not cfg.master:
        raise UsageError("--nnodes above 1 needs --master HOST:PORT (the same on every node)")
    if cfg.master:
        host, sep, port = cfg.master.rpartition(":")
        if not sep or not host or parse_int(port, lo=1, hi=65535, strip=False) is None:
            raise UsageError(f"--master {cfg.master!r}: expected HOST:PORT, e.g. node0:29500")
        from ..cluster.endpoint import parse_endpoint

        parse_endpoint(cfg.master)  # a host the resolver cannot take: one line now, not torchrun waiting unseen
    if cfg.module is not None and not MODULE.match(cfg.module):
        raise UsageError(f"-m {cfg.module!r}: expected a module name such as package.train")
    if cfg.script is not None:
        path = Path(cfg.script)
        if not path.is_file():
            raise UsageError(f"script {cfg.script}: no such file")
        if path.suffix != ".py":
            raise UsageError(f"script {cfg.script}: expected a Python file (.py)")
    if cfg.hang_timeout is not None and not (math.isfinite(cfg.hang_timeout) and 0 < cfg.hang_timeout
                                             <= HANG_TIMEOUT_MAX):
        raise UsageError(f"--hang-timeout {cfg.hang_timeout}: must be positive (seconds), finite and at most "
                         f"{HANG_TIMEOUT_MAX:.0f}")
    if cfg.busy_timeout is not None and not (math.isfinite(cfg.busy_timeout) and 0 < cfg.busy_timeout
                                             <= HANG_TIMEOUT_MAX):
        raise UsageError(f"--busy-timeout {cfg.busy_timeout}: must be positive (seconds), finite and at most "
                         f"{HANG_TIMEOUT_MAX:.0f}")
    run_dir = Path(cfg.run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot create ({exc.strerror or exc})") from exc
    if not os.access(run_dir, os.W_OK):
        raise UsageError(f"--run-dir {run_dir}: not writable")
    try:  # os.access says yes to root where nothing can be made (/proc): try it
        os.rmdir(tempfile.mkdtemp(prefix=".ddpdoctor-probe-", dir=run_dir))
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot create a folder there ({exc.strerror or exc})") from None
    cfg.run_id = resolve_run_id(cfg, os.environ)
    check_fresh(cfg)
    if cfg.resume is not None:
        cfg.resume_from = str(resume_snapshot(cfg))
    if not cfg.master and cfg.standalone_endpoint is None:
        # Port 0 ("pick one") breaks torchrun's restarts (attempt 2 never meets): choose a free port up front.
        from ..cluster.local import free_port

        cfg.standalone_endpoint = f"127.0.0.1:{free_port()}"
    if cfg.omp_threads is None:
        # torchrun would default to 1 with a warning; share this node's cores between the local ranks instead.
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        cfg.omp_threads = max(1, cpus // cfg.nproc_per_node)
    return cfg


def derived_id(cfg: TrainerConfig) -> str:
    """Identical on every node without coordination: derived from what every node is given alike."""
    digest = hashlib.sha256(f"{cfg.endpoint()}|{cfg.nnodes}".encode()).hexdigest()[:10]
    return f"ddpdoctor-{digest}"


def resolve_run_id(cfg: TrainerConfig, env) -> str:
    """--rdzv-id; else the scheduler's job id (the same on every node of the job); else, on one node, a new id.
    Several nodes without either can only agree on an id derived from --master and --nnodes."""
    if cfg.run_id:
        return check_run_id(cfg.run_id)
    for var in SCHEDULER_IDS:
        if env.get(var):
            return re.sub(r"[^A-Za-z0-9._-]", "-", env[var].strip())[:64].lstrip("._-") or "job"
    if cfg.nnodes == 1:
        return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    return derived_id(cfg)


def check_fresh(cfg: TrainerConfig) -> None:
    """A run id names one invocation: records already under it belong to an earlier one, which this one must
    neither continue silently nor report. (Workers write them only after every node has passed this check.)"""
    found = [name for name in RECORDS if (cfg.records() / name).exists()]
    if found:
        raise UsageError(f"run {cfg.run_id} already has records in {cfg.records()} ({', '.join(found)}): an earlier "
                         f"invocation; pass a new --rdzv-id (the same on every node), or --resume {cfg.run_id} to "
                         "continue from its snapshot")


def resume_snapshot(cfg: TrainerConfig) -> Path:
    """The snapshot --resume names: an earlier run's, picked explicitly (an id) or as the newest (latest)."""
    if not cfg.is_reference:
        raise UsageError("--resume: only the reference trainer resumes from ddpdoctor's snapshots; your script "
                         "restores its own checkpoints")
    root = Path(cfg.run_dir)
    if cfg.resume == "latest":
        found = sorted((p for p in root.glob("*/snapshots/latest.pt") if p.parts[-3] != cfg.run_id),
                       key=lambda p: p.stat().st_mtime)
        if not found:
            raise UsageError(f"--resume latest: no earlier run with a snapshot in {root}")
        return found[-1]
    check_run_id(cfg.resume, "--resume")
    if cfg.resume == cfg.run_id:
        raise UsageError(f"--resume {cfg.resume}: that is this invocation's own run id; give this one a new --rdzv-id")
    snap = root / cfg.resume / "snapshots" / "latest.pt"
    if not snap.is_file():
        raise UsageError(f"--resume {cfg.resume}: no snapshot at {snap}")
    return snap


def resumed_run(cfg: TrainerConfig) -> str | None:
    return Path(cfg.resume_from).parts[-3] if cfg.resume_from else None


def node_label(cfg: TrainerConfig) -> str:
    """This node's subdirectory of run_dir/logs: unique even for simulated nodes sharing a hostname."""
    return f"{socket.gethostname()}-{cfg.local_addr or 'node'}-{os.getpid()}"


def socket_dir(cfg: TrainerConfig, label: str) -> Path:
    """Where this node's ranks put their worker-server sockets: short (a unix socket path holds 108 bytes),
    private to the user, one per run and node."""
    import tempfile

    digest = hashlib.sha256(f"{cfg.records().resolve()}|{label}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"ddpdoctor-{os.getuid()}" / digest


def python() -> str:
    return sys.executable

