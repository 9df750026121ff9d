"""The torchrun command line and environment for a run: torch's own launcher, error files and per-rank logs.

Every node builds the same rendezvous arguments (c10d backend, endpoint, id, node count), so a mismatch
can only come from the flags it was given (the preflight's launch-args check compares those).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..lifetime import AGENT_IGNORED_ENV, CHECKPOINT_SIGNALS
from .config import REFERENCE_MODULE, TrainerConfig, node_label, python, socket_dir

BOOTSTRAP = "ddpdoctor.launch.bootstrap"
# Per process: ~480 bytes of JSON each, serialised by the rank's server thread at every watchdog poll; a
# hang is judged from the last few collectives only, and the exit dump covers the summary.
FR_ENTRIES = "200"
NCCL_FR_ENTRIES = "2000"  # a CUDA node's: NCCL's watchdog dumps these on a timeout
# torch reads the first of these that is set for every backend's recorder (FlightRecorder.hpp; torch 2.15's
# nccl2 hook: distributed_c10d.py `_maybe_attach_flight_recorder`): one size, set once, under the first name
FR_BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
NODE_FILE = "node.json"  # in this node's log dir: its node rank, written by its local rank 0 (bootstrap)


def log_dir(cfg: TrainerConfig, label: str | None = None) -> Path:
    return cfg.records() / "logs" / (label or node_label(cfg))


def argv(cfg: TrainerConfig, logs: Path) -> list[str]:
    """`python -m torch.distributed.run ...`: per-rank stdout/stderr files and error.json under ``logs``."""
    out = [python(), "-m", "torch.distributed.run",
           "--nnodes", str(cfg.nnodes), "--nproc-per-node", str(cfg.nproc_per_node),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", cfg.endpoint(), "--rdzv-id", cfg.rendezvous_id(),
           "--max-restarts", str(cfg.max_restarts), "--monitor-interval", "0.5",
           "--log-dir", str(logs), "--redirects", "3", "--tee", "3"]
    if cfg.local_addr:
        out += ["--local-addr", cfg.local_addr]
    # Every worker starts in the bootstrap (error file, stacks on SIGUSR1, the worker server), which then runs
    # the reference trainer or the user's script exactly as torchrun would have.
    out += ["-m", BOOTSTRAP]
    if cfg.is_reference:
        out += ["-m", REFERENCE_MODULE, "--run-dir", str(cfg.records()), "--data-dir", str(cfg.data_dir())]
        if cfg.resume_from:
            out += ["--resume-from", cfg.resume_from]
        out += cfg.script_args
    elif cfg.module:
        out += ["-m", cfg.module, *cfg.script_args]
    else:
        out += [cfg.script, *cfg.script_args]
    return out


def environment(cfg: TrainerConfig, cuda: bool, label: str | None = None) -> dict:
    env = dict(os.environ)
    # Forensics (the bootstrap reads these): torch's flight recorder on every backend, gloo included, stacks
    # on SIGUSR1 into the run's stacks/, and each rank's worker server on a short socket path (108 bytes max).
    if not any(name in env or name in cfg.env for name in FR_BUFFER_VARS):  # the user's own size wins
        env["TORCH_FR_BUFFER_SIZE"] = NCCL_FR_ENTRIES if cuda else FR_ENTRIES
    env["DDPDOCTOR_STACKS_DIR"] = str(cfg.records().resolve() / "stacks")
    env["DDPDOCTOR_FR_DIR"] = str(cfg.records().resolve() / "flight_recorder")  # each rank's at its exit
    env["DDPDOCTOR_CALLS_DIR"] = str(cfg.records().resolve() / "call_sizes")  # send/recv sizes, Python 3.12+
    env["DDPDOCTOR_NODE_FILE"] = str(log_dir(cfg, label).resolve() / NODE_FILE)  # this node's node rank
    env["DDPDOCTOR_WORKER_SOCKET"] = str(socket_dir(cfg, label or node_label(cfg)) / "{rank}.sock")
    env["OMP_NUM_THREADS"] = str(cfg.omp_threads)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a fatal signal in any rank prints its Python stack into its log
    env[AGENT_IGNORED_ENV] = ",".join(sig.name for sig in CHECKPOINT_SIGNALS)  # the bootstrap restores them
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if cuda:
        # PyTorch's NCCL flight recorder: the last collectives of every rank, dumped when the watchdog fires.
        env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        env.setdefault("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", str(cfg.records().resolve() / "nccl_trace_rank_"))
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    for key, value in cfg.env.items():
        env.setdefault(key, value)  # the user's own setting wins over the preflight's suggestion
    return env
