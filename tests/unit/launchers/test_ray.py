"""launchers/ray.py: which of Ray's processes is a rank (a Ray Train worker, by its title), which never is (Ray's
daemons, its idle and other workers), and a worker's rank from Ray's own system log of it. The records below are
Ray 2.60's (ray-train-sys-worker-<id>.log of a 2-worker TorchTrainer), cut to the fields read."""
from __future__ import annotations

import json

import pytest

from ddpdoctor.launchers import agents, ray


def record(pid: int, rank: int, message: str = "using gloo", run: str = "ray_train_run-2026-11-29_01-10-05",
           **extra) -> str:
    return json.dumps({"asctime": "2026-11-29 01:10:20,581", "levelname": "DEBUG", "message": message,
                       "filename": "config.py", "process": pid, "job_id": "01000000", "run_name": run,
                       "component": "worker", "world_rank": rank, "local_rank": rank, "node_rank": 0, **extra})


def setup(pid: int, rank: int, world: int) -> str:
    return record(pid, rank, f"Setting up process group for: env:// [rank={rank}, world_size={world}]")


@pytest.mark.parametrize("argv,worker,own", [
    (["ray::RayTrainWorker" + " " * 300], True, False),
    (["ray::RayTrainWorker.run_train_fn"], True, False),
    (["ray::_RayTrainWorker__execute.get_next"], True, False),  # Train v1's
    (["ray::IDLE"], False, True),
    (["ray::TrainController.run"], False, True),
    (["ray::RayTrainWorkerX"], False, True),  # another actor whose name merely starts alike
    (["/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet", "--raylet_socket_name=/tmp/r"], False, True),
    (["/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server", "--log_dir=/tmp/r"], False, True),
    (["/venv/bin/python", "-u", "/venv/lib/python3.11/site-packages/ray/_private/log_monitor.py"], False, True),
    (["/venv/bin/python", "/venv/lib/python3.11/site-packages/ray/dashboard/dashboard.py", "--host=x"], False, True),
    (["/venv/bin/python", "/venv/lib/python3.11/site-packages/ray/_private/workers/default_worker.py"], False, True),
    # the user's own scripts, whatever their folders are called: ranks of other launchers, never Ray's
    (["python", "/home/u/ray/train.py"], False, False),
    (["python", "/home/u/ray/dashboard/plot.py"], False, False),
    (["python", "train_ray.py", "ray::RayTrainWorker"], False, False),
    ([], False, False),
])
def test_a_ray_train_worker_is_told_by_its_title_and_rays_own_processes_are_never_ranks(argv, worker, own):
    assert ray.is_worker(argv) is worker
    assert ray.is_own_process(argv) is own
    assert agents.never_rank(argv) is own
    assert not agents.is_agent(argv)  # Ray's daemons are never signalled by --stop as torchrun's agent is


def test_never_rank_keeps_the_launcher_agents():
    assert agents.never_rank(["python", "-m", "torch.distributed.run", "train.py"])
    assert not agents.never_rank(["python", "train.py"])


@pytest.mark.parametrize("path,ok", [
    ("/tmp/ray/session_2026-11-29_01-09-56_551602_22174/logs/train/ray-train-sys-worker-cdc80bce2a86.log", True),
    ("/tmp/ray/session_x/logs/train/ray-train-app-worker-cdc80bce2a86.log", False),  # the job's own log level
    ("/tmp/ray/session_x/logs/train/ray-train-sys-controller-cdc80bce2a86.log", False),
    ("/tmp/ray/session_x/logs/ray-train-sys-worker-cdc80bce2a86.log", False),
    ("/tmp/ray/session_x/logs/train/ray-train-sys-worker-../../x.log", False),
])
def test_the_rank_log_is_ray_trains_system_log_of_a_worker(path, ok):
    assert ray.is_rank_log(path) is ok


def test_a_workers_rank_and_world_come_from_its_own_records():
    text = "\n".join([setup(23176, 1, 2), record(23176, 1), record(23176, 1, "Moving model to device: cpu")])
    got = ray.rank_of_log(text, 23176)
    assert got == ray.RayRank(1, 1, 0, 2, "ray_train_run-2026-11-29_01-10-05")
    assert got.key == "ray:ray_train_run-2026-11-29_01-10-05"


def test_without_the_setup_record_the_world_is_unknown():
    got = ray.rank_of_log(record(7, 3), 7)
    assert got.rank == 3 and got.world_size is None


@pytest.mark.parametrize("text", [
    record(999, 1),  # another process's log (a pid reused, a file passed around): not this worker's rank
    record(7, 1).replace('"world_rank": 1', '"world_rank": "1"'),
    record(7, 1).replace('"world_rank": 1', '"world_rank": true'),
    record(7, 1).replace('"world_rank": 1', '"world_rank": -1'),
    record(7, 1, run=""),
    "\n".join([record(7, 0), record(7, 1)]),  # one process, two ranks
    setup(7, 2, 2),  # a rank outside its world
    "not json\n[1, 2]\n{\"process\": 7",
    "",
])
def test_a_record_that_does_not_say_this_workers_rank_gives_none(text):
    assert ray.rank_of_log(text, 7) is None


def test_a_cut_last_line_and_other_lines_are_skipped():
    text = "\n".join(["Traceback (most recent call last):", setup(7, 0, 3), record(7, 0)[:40]])
    assert ray.rank_of_log(text, 7) == ray.RayRank(0, 0, 0, 3, "ray_train_run-2026-11-29_01-10-05")


SESSION = "/tmp/ray/session_2026-11-29_01-25-44_740444_13386"


def test_a_logs_session_is_the_folder_above_its_logs():
    assert ray.session_of(f"{SESSION}/logs/train/ray-train-sys-worker-cdc80bce.log") == SESSION
    assert ray.session_of(f"{SESSION}/logs/python-core-driver-01000000ffff_13386.log") == SESSION
    assert ray.session_of("/home/u/train.log") == ""


@pytest.mark.parametrize("pid,held,driver", [
    (13386, [f"{SESSION}/logs/python-core-driver-01000000ffff_13386.log"], True),
    # its log names another pid, lies in another session, or is not Ray's driver log: a rank as it was
    (13386, [f"{SESSION}/logs/python-core-driver-01000000ffff_999.log"], False),
    (13386, ["/tmp/ray/session_other/logs/python-core-driver-01000000ffff_13386.log"], False),
    (13386, [f"{SESSION}/logs/python-core-worker-01000000ffff_13386.log"], False),
    (13386, [f"{SESSION}/logs/train/python-core-driver-01000000ffff_13386.log"], False),
    (13386, [], False),
])
def test_the_driver_of_a_ray_train_job_found_here_is_no_rank(pid, held, driver):
    assert ray.is_driver(pid, held, {SESSION}) is driver
