"""The typed launch configuration of run-trainer: parsed from flags (mirrored by DDPDOCTOR_* env vars), then validated."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UsageError

REFERENCE_MODULE = "ddpdoctor_trainer.train"


@dataclass
class TrainerConfig:
    nnodes: int = 1
    nproc_per_node: int = 1
    master: str | None = None  # HOST:PORT of the c10d rendezvous (torchrun --rdzv-endpoint)
    local_addr: str | None = None
    max_restarts: int = 0
    run_dir: str = "ddpdoctor-run"
    rdzv_id: str | None = None
    hang_timeout: float | None = None
    preflight: str = "ran"  # ran | skipped | forced
    preflight_args: list[str] = field(default_factory=list)
    script: str | None = None  # None: the reference trainer (python -m ddpdoctor_trainer.train)
    script_args: list[str] = field(default_factory=list)
    omp_threads: int | None = None
    env: dict = field(default_factory=dict)  # extra env for the workers (interfaces found by preflight)
    standalone_endpoint: str | None = None  # one node, no --master: a free local port, chosen once

    @property
    def is_reference(self) -> bool:
        return self.script is None

    def endpoint(self) -> str:
        return self.master or self.standalone_endpoint or "127.0.0.1:29500"

    def rendezvous_id(self) -> str:
        # Identical on every node without coordination: derived from what every node is given alike.
        digest = hashlib.sha256(f"{self.endpoint()}|{self.nnodes}".encode()).hexdigest()[:10]
        return self.rdzv_id or f"ddpdoctor-{digest}"

    def to_json(self) -> dict:
        # What run.json stores: secrets in the user's arguments redacted (the processes get the real ones).
        from ..redact import redact_argv, redact_env

        return {**asdict(self), "script_args": redact_argv(self.script_args),
                "preflight_args": redact_argv(self.preflight_args), "env": redact_env(self.env)}


def validate(cfg: TrainerConfig) -> TrainerConfig:
    if cfg.nnodes > 1 and not cfg.master:
        raise UsageError("--nnodes above 1 needs --master HOST:PORT (the same on every node)")
    if cfg.master:
        host, sep, port = cfg.master.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--master {cfg.master!r}: expected HOST:PORT, e.g. node0:29500")
    if cfg.script is not None:
        path = Path(cfg.script)
        if not path.is_file():
            raise UsageError(f"script {cfg.script}: no such file")
        if path.suffix != ".py":
            raise UsageError(f"script {cfg.script}: expected a Python file (.py)")
    if cfg.hang_timeout is not None and cfg.hang_timeout <= 0:
        raise UsageError("--hang-timeout must be positive (seconds)")
    run_dir = Path(cfg.run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot create ({exc.strerror or exc})") from exc
    if not os.access(run_dir, os.W_OK):
        raise UsageError(f"--run-dir {run_dir}: not writable")
    if not cfg.master and cfg.standalone_endpoint is None:
        # Port 0 ("pick one") breaks torchrun's restarts (attempt 2 never meets): choose a free port up front.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            cfg.standalone_endpoint = f"127.0.0.1:{sock.getsockname()[1]}"
    if cfg.omp_threads is None:
        # torchrun would default to 1 with a warning; share this node's cores between the local ranks instead.
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        cfg.omp_threads = max(1, cpus // cfg.nproc_per_node)
    return cfg


def node_label(cfg: TrainerConfig) -> str:
    """This node's subdirectory of run_dir/logs: unique even for simulated nodes sharing a hostname."""
    return f"{socket.gethostname()}-{cfg.local_addr or 'node'}-{os.getpid()}"


def python() -> str:
    return sys.executable


def py_spy() -> str | None:
    return shutil.which("py-spy")
