"""Starting the benchmark's ranks: in this process under a launcher, or through torch's elastic launcher.

Under torchrun/srun (RANK and WORLD_SIZE in the environment) this process is one rank. Otherwise
``ddpdoctor nccl-bench`` starts ``nproc`` local ranks with torch.distributed.launcher.api.elastic_launch
(torchrun's own machinery: c10d rendezvous, worker monitoring, error files), across nodes when given
``--master/--nnodes``. A rank that dies is named from torch's ChildFailedError (rank, host, exit code).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass

from ..errors import DdpdoctorError
from ..exitcodes import ExitCode
from ..cluster.local import free_port
from .harness import PROGRESS_ENV
from .worker import CONFIG_ENV, main as worker_main


class BenchFailed(DdpdoctorError):
    exit_code = ExitCode.FAIL


@dataclass
class LaunchPlan:
    nproc: int
    nnodes: int = 1
    master: str | None = None  # HOST:PORT of the c10d rendezvous; default: this machine, a free port
    node_rank: int | None = None
    rdzv_timeout_s: int = 120


def under_launcher(env=os.environ) -> bool:
    return "RANK" in env and "WORLD_SIZE" in env


def run_in_this_process(cfg: dict) -> None:
    worker_main(cfg)


def start_ranks(cfg: dict, plan: LaunchPlan) -> None:
    """Start the ranks through torch's launcher; the config travels as a JSON file named in the env."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    run_dir = tempfile.mkdtemp(prefix="ddpdoctor-bench-")
    cfg_path = os.path.join(run_dir, "config.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    endpoint = plan.master or f"127.0.0.1:{free_port()}"
    lc = LaunchConfig(
        min_nodes=plan.nnodes, max_nodes=plan.nnodes, nproc_per_node=plan.nproc,
        run_id=f"ddpdoctor-bench-{uuid.uuid5(uuid.NAMESPACE_DNS, endpoint).hex[:8]}",
        rdzv_backend="c10d", rdzv_endpoint=endpoint, rdzv_timeout=plan.rdzv_timeout_s,
        rdzv_configs={"rank": plan.node_rank} if plan.node_rank is not None else {},
        max_restarts=0, monitor_interval=0.1, start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=os.path.join(run_dir, "logs")),
    )
    os.environ[CONFIG_ENV] = cfg_path
    progress = os.path.join(run_dir, "progress")
    os.makedirs(progress, exist_ok=True)
    os.environ[PROGRESS_ENV] = progress
    try:
        elastic_launch(lc, _entry)()
    except ChildFailedError as exc:
        behind = ranks_behind(progress)
        raise BenchFailed(behind + describe_failure(exc) if behind else describe_failure(exc)) from None
    finally:
        # The config, the progress notes and torch's per-rank logs have been read: nothing outlives the command.
        shutil.rmtree(run_dir, ignore_errors=True)


def _entry() -> int:
    return worker_main(None)


def ranks_behind(progress_dir: str) -> str:
    """'rank 1 on node7 stopped answering before all_reduce 65536 B; ' when one rank's last note lags."""
    notes = []
    for name in os.listdir(progress_dir):
        try:
            with open(os.path.join(progress_dir, name)) as fh:
                notes.append(json.load(fh))
        except (OSError, ValueError):
            continue
    if len(notes) < 2:
        return ""
    furthest = max(n["step"] for n in notes)
    lagging = sorted((n for n in notes if n["step"] < furthest), key=lambda n: n["rank"])
    if not lagging or len(lagging) == len(notes):
        return ""
    ahead = next(n for n in notes if n["step"] == furthest)
    who = ", ".join(f"rank {n['rank']} on {n['host']}" for n in lagging)
    return (f"{who} stopped answering: the others entered {ahead['op']} {ahead['size']} B and waited for it "
            f"until the timeout; ")


def describe_failure(exc) -> str:
    """The first rank that failed, from torch's own failure record: rank, host, exit code or signal, error."""
    rank, failure = exc.get_first_failure()
    code = failure.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    if failure.signal_name() not in ("", "<N/A>") and code is not None and code < 0:
        how = f"was killed by {failure.signal_name()}"
    inner = failure.message
    while isinstance(inner, dict):  # an error file's {"message": {"message": "...", "extraInfo": ...}}
        inner = inner.get("message", "")
    lines = str(inner or "").splitlines()
    message = lines[0] if lines else ""
    host = getattr(failure, "hostname", None) or socket.gethostname()
    others = sorted(r for r in exc.failures if r != rank)
    tail = f"; ranks {', '.join(map(str, others))} stopped after it" if others else ""
    return f"rank {rank} on {host} {how}" + (f": {message}" if message else "") + tail
