"""Ray Train (`ray.train.torch.TorchTrainer`, Ray Train v2) as a launcher: which of Ray's processes is a rank, and
how a rank is told from outside.

Ray starts its workers itself (the raylet forks them; no torchrun) and Ray Train sets RANK, WORLD_SIZE, LOCAL_RANK
and MASTER_ADDR/PORT in each worker's os.environ after it starts, so /proc/PID/environ holds none of them. A rank
is a worker whose process title is Ray Train's (``ray::RayTrainWorker``, ``ray::RayTrainWorker.<method>`` while
it runs an actor task); every other process of Ray's (the raylet, the GCS, the dashboard and its agents, idle
pooled workers ``ray::IDLE``, the TrainController and Ray's other actors) is never a rank (``is_own_process``).

Its rank is read from Ray's own record of it: every Ray Train worker holds open its system log
``<session>/logs/train/ray-train-sys-worker-<worker id>.log`` (JSON lines, written at DEBUG level whatever the
job's log level), and Ray stamps every record with the worker's ``world_rank``, ``local_rank``, ``node_rank``, its
``process`` id and the run's ``run_name``; its process-group set-up record says the world size. Why this and not
the other handles a rank has: py-spy's locals show only the user's own variables (a rank is an object's field,
which py-spy prints as an address); the process title and the environment carry no rank; the TCPStore and gloo
connections tell rank 0 (the store's host) but not the others (gloo pairs connect by address, not rank); torch's
flight recorder answers only where the job set it up before starting; asking Ray's GCS means joining the job's
cluster as a driver. The log is Ray's own word on this very process (its pid in every record), local, read
without touching the job, and attach reads it only as a file the worker's own process holds open, with the job's
rights (forensics/attach/job_access.py). Ray Train v1 (RAY_TRAIN_V2_ENABLED=0), and v2 with
RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING=0, keep no such log: their workers are seen but not ranked (attach says
so).

Ray runs the training function in a thread of its own (``TrainingThread(...)``), not the worker's main thread:
``TRAINING_THREAD`` names the thread whose stack is the rank's.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

NAME = "ray"
# ray.train.v2._internal.execution.worker_group.worker.RayTrainWorker; Train v1's, while it runs its (name-mangled)
# __execute: a worker too, though it keeps no record of its rank (attach says so rather than "no job")
WORKER_TITLES = ("ray::RayTrainWorker", "ray::_RayTrainWorker__execute")
TRAINING_THREAD = "TrainingThread("  # thread_runner.ThreadRunner: TrainingThread(<the train function's name>)
# Ray's own programs (its daemons) and the scripts its Python daemons run: never a rank, whatever they inherit
DAEMONS = frozenset({"raylet", "gcs_server", "plasma_store"})
DAEMON_SCRIPTS = ("/ray/dashboard/dashboard.py", "/ray/dashboard/agent.py", "/ray/autoscaler/_private/monitor.py",
                  "/ray/_private/log_monitor.py", "/ray/_private/workers/default_worker.py",
                  "/ray/_private/workers/setup_worker.py", "/ray/_private/runtime_env/agent/main.py")
_SYS_LOG = re.compile(r"^ray-train-sys-worker-[0-9a-f]{8,}\.log$")
_DRIVER_LOG = re.compile(r"^python-core-driver-[0-9a-f]+_\d+\.log$")
_SETUP = re.compile(r"\[rank=(\d+), world_size=(\d+)\]")  # torch/config.py: "Setting up process group for: ..."
HEAD_BYTES = 256 << 10  # the set-up records come first; a long job's log is read from its start only
_MAX_INT = 1 << 24


@dataclass(frozen=True)
class RayRank:
    """A Ray Train worker's identity as Ray's own record gives it."""
    rank: int
    local_rank: int | None
    node_rank: int | None
    world_size: int | None
    run: str  # the run's name (RunConfig.name, else Ray's ray_train_run-<time>): the job's key
    session: str = ""  # the Ray session folder its log lies in (session_of): its driver's too

    @property
    def key(self) -> str:
        return f"ray:{self.run}"


def _title(argv: list[str]) -> str:
    # Ray's setproctitle leaves the title as argv[0], padded with spaces over the old command line
    return argv[0].strip() if argv else ""


def is_worker(argv: list[str]) -> bool:
    """A Ray Train worker: its title is RayTrainWorker's (alone, or with the actor method it runs)."""
    title = _title(argv)
    return any(title == t or title.startswith(t + ".") for t in WORKER_TITLES)


def is_own_process(argv: list[str]) -> bool:
    """One of Ray's own processes that is never a rank: its daemons (raylet, GCS), its Python daemons' scripts
    (dashboard, monitor, log monitor, a pooled worker before it takes a title), and any ``ray::`` title but a
    training worker's (``ray::IDLE``, ``ray::TrainController.run``, Ray's other actors)."""
    title = _title(argv)
    if title.startswith("ray::"):
        return not is_worker(argv)
    if os.path.basename(title) in DAEMONS:
        return True
    return any(a.endswith(DAEMON_SCRIPTS) for a in argv[1:3])


def is_rank_log(path: str) -> bool:
    """A path a worker holds open that is Ray Train's system log of a worker (logs/train/ray-train-sys-worker-*)."""
    parent = os.path.basename(os.path.dirname(path))
    return parent == "train" and bool(_SYS_LOG.match(os.path.basename(path)))


def is_driver_log(path: str) -> bool:
    """A path a process holds open that is Ray's core-driver log (<session>/logs/python-core-driver-*_<pid>.log)."""
    return os.path.basename(os.path.dirname(path)) == "logs" and bool(_DRIVER_LOG.match(os.path.basename(path)))


def session_of(path: str) -> str:
    """The Ray session folder of a log Ray keeps (<session>/logs/..., <session>/logs/train/...), or ""."""
    head, sep, _ = path.rpartition("/logs/")
    return head if sep else ""


def is_driver(pid: int, held: list[str], sessions: set[str]) -> bool:
    """The driver of a Ray Train job found here (the user's `python train.py` that called ray.init and fit): it
    holds Ray's core-driver log of its own pid (<session>/logs/python-core-driver-<job id>_<pid>.log) in the
    session of a training worker found here. A launcher's process, never a rank, whatever rank variable a
    scheduler gave it (an sbatch script's SLURM_PROCID). A torch rank that merely uses Ray (Ray Data inside a
    torchrun job) drives a session with no training worker: it stays a rank."""
    return any(is_driver_log(path) and path.endswith(f"_{pid}.log") and session_of(path) in sessions
               for path in held)


def rank_of_log(text: str, pid: int) -> RayRank | None:
    """The worker's identity from its system log's records: the first record of process ``pid`` with an integer
    world_rank; the world size from its process-group set-up record (None when that record is not there); None
    when no record of ``pid`` says its rank (another process's log, not JSON, not Ray Train's)."""
    found: dict | None = None
    world: int | None = None
    for line in text.splitlines():
        record = _record(line)
        if record is None or record.get("process") != pid or _int(record.get("world_rank")) is None:
            continue
        if found is None:
            found = record
        elif _int(record.get("world_rank")) != _int(found.get("world_rank")):
            return None  # one process, two ranks: not a record to trust
        setup = _SETUP.search(str(record.get("message", "")))
        if setup and int(setup.group(1)) == _int(found["world_rank"]) and 0 < int(setup.group(2)) <= _MAX_INT:
            world = int(setup.group(2))
    if found is None or not isinstance(found.get("run_name"), str) or not found["run_name"]:
        return None
    rank = _int(found["world_rank"])
    if world is not None and rank >= world:
        return None
    return RayRank(rank, _int(found.get("local_rank")), _int(found.get("node_rank")), world, found["run_name"][:200])


def _record(line: str) -> dict | None:
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _int(value) -> int | None:
    # JSON's integers only (a bool is an int to Python, never a rank)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_INT else None
