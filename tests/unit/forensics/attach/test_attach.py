"""attach's pieces on recorded evidence: py-spy's text parsed (tests/unit/forensics/data/pyspy/: real dumps of gloo
ranks under torch 2.13), what torch's frames say a rank waits in, discovery from environments, the judge."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ddpdoctor.errors import NothingReadable, UsageError
from ddpdoctor.forensics.attach import discover as disc
from ddpdoctor.forensics.attach import run as attach_run
from ddpdoctor.forensics.attach.decide import Motion, decide, motion, undecided, undecided_here
from ddpdoctor.forensics.attach.decide import outcome_of
from ddpdoctor.forensics.attach.sample import RankRead, read_rank
from ddpdoctor.forensics.evidence import pyspy
from ddpdoctor.forensics.evidence.model import Source, WaitKind

DATA = Path(__file__).parents[1] / "data" / "pyspy"


def dump(name: str) -> pyspy.Dump:
    return pyspy.parse((DATA / f"{name}.txt").read_text())


def test_parse_a_waiting_rank_with_locals():
    d = dump("allreduce_waiter")
    assert d.pid == 16865 and len(d.threads) == 1
    thread = d.main_thread()
    assert thread.name == "MainThread" and thread.state == "idle"
    inner = thread.frames[0]
    assert inner.function == "all_reduce" and inner.file.endswith("torch/distributed/distributed_c10d.py")
    assert inner.line == 3252 and inner.arguments["async_op"] == "False" and "work" in inner.locals
    assert thread.frames[-1].function == "<module>" and thread.frames[-1].where == "/tmp/u31rec/job.py:12"


@pytest.mark.parametrize("name,kind,op,peer", [
    ("allreduce_waiter", WaitKind.COLLECTIVE, "all_reduce", None),
    ("broadcast", WaitKind.COLLECTIVE, "broadcast", None),
    ("recv_src1", WaitKind.RECV, "recv", 1),
    ("own_code", WaitKind.NONE, None, None),
])
def test_the_records_say_what_a_rank_waits_in(name, kind, op, peer):
    """py-spy's frames become the model's: torch's recv frame carries src=1 in its arguments (--locals)."""
    state = pyspy.to_state(dump(name), 3, host="n1")
    assert state.source is Source.PY_SPY and state.rank == 3 and state.host == "n1"
    assert (state.wait.kind, state.wait.call.op if state.wait.call else None, state.wait.peer) == (kind, op, peer)
    assert state.frames[0].local("async_op" if name == "allreduce_waiter" else "nothing") in ("False", None)


def test_parse_threads_names_and_frames_without_line():
    text = ('Process 7: python x.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n'
            'Thread 0x7F00 (active+gil): "MainThread"\n    step (/src/train.py:41)\n        Arguments:\n'
            '            dst: 3\n    <module> (/src/train.py:90)\n\nThread 8 (idle): "pt_elastic"\n'
            '    run (/usr/lib/python3.11/threading.py)\n')
    d = pyspy.parse(text)
    assert d.pid == 7 and [t.name for t in d.threads] == ["MainThread", "pt_elastic"]
    assert d.threads[1].frames[0].line is None and d.main_thread().frames[0].arguments == {"dst": "3"}


RAY_WORKER = ('Process 23176: ray::RayTrainWorker\nPython v3.11.7 (/usr/bin/python3.11)\n\n'
              'Thread 23176 (idle): "MainThread"\n    Worker.main_loop (/venv/ray/_private/worker.py:1069)\n'
              '    <module> (/venv/ray/_private/workers/default_worker.py:323)\n'
              'Thread 23286 (idle): "MonitoringThread(train_fn_with_final_checkpoint_flush)"\n'
              '    ThreadRunner._monitor_target (/venv/ray/train/v2/_internal/execution/worker_group/'
              'thread_runner.py:72)\n'
              'Thread 23287 (idle): "TrainingThread(train_fn_with_final_checkpoint_flush)"\n'
              '    inject (/src/faults.py:55)\n    train_loop (/src/ray_job.py:38)\n'
              '    ThreadRunner.run.<locals>._run_target (/venv/ray/train/v2/_internal/execution/worker_group/'
              'thread_runner.py:37)\n    Thread._bootstrap (/usr/lib/python3.11/threading.py:1002)\n')


def test_a_launcher_that_trains_in_a_thread_of_its_own_has_that_threads_stack_read():
    """Ray Train runs the training function in TrainingThread(...); the worker's main thread is Ray's task loop.
    A rank discovered as Ray's names that thread (RankProcess.thread, set on its dumps); any other keeps
    MainThread, and so does a Ray worker whose training thread is gone."""
    from ddpdoctor.launchers import ray

    d = pyspy.parse(RAY_WORKER)
    assert d.main_thread().name == "MainThread"
    d.thread = ray.TRAINING_THREAD
    assert d.main_thread().frames[0].where == "/src/faults.py:55"
    state = pyspy.to_state(d, 1)
    assert state.raw["thread"].startswith("TrainingThread(") and state.frames[1].function == "train_loop"
    d.threads = [t for t in d.threads if t.name == "MainThread"]
    assert d.main_thread().name == "MainThread"


def test_failures_are_classified():
    assert pyspy.classify_failure("Error: Permission denied (os error 13)", 1) is pyspy.DumpFailure.PERMISSION
    assert pyspy.classify_failure("Error: Operation not permitted (os error 1)", 1) is pyspy.DumpFailure.PERMISSION
    assert pyspy.classify_failure("No such file or directory (os error 2)", 1 << 30) is pyspy.DumpFailure.GONE


def test_a_refused_py_spy_is_a_permission_failure(tmp_path):
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Operation not permitted (os error 1)' >&2\nexit 1\n")
    fake.chmod(0o755)
    d = pyspy.dump(1, tool=str(fake))
    assert d.failure is pyspy.DumpFailure.PERMISSION and "not permitted" in d.error


def test_the_binary_is_found_beside_the_interpreter(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    found = pyspy.binary()
    assert found is not None and Path(found).name == "py-spy"


@pytest.mark.parametrize("env,expected", [
    ({"RANK": "2", "LOCAL_RANK": "2", "WORLD_SIZE": "4", "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "j"},
     (2, "torchrun", 2, 4)),
    ({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NODEID": "2",
      "SLURM_JOB_NODELIST": "n[1-4]"}, (5, "slurm", 1, 8)),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}, (3, "mpi", 1, 4)),
    ({"RANK": "1", "WORLD_SIZE": "2"}, (1, None, None, 2)),
    # Lightning's own launcher: no rank variable (its parent, local rank 0, tells: spawned_ranks), whatever
    # scheduler's variables it inherited
    ({"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "5",
      "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n1"}, (None, "lightning", 1, 2)),
    ({"RANK": "²", "WORLD_SIZE": "2"}, (None, None, None, None)),
    ({"OMPI_COMM_WORLD_RANK": "١", "OMPI_COMM_WORLD_SIZE": "4"}, (None, None, None, None)),
    ({"PATH": "/bin"}, (None, None, None, None)),
])
def test_a_processes_rank_from_its_environment(env, expected):
    assert disc.rank_of(env) == expected


LIGHTNING_PARENT = r"""
import os, subprocess, sys, time
env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29999", NODE_RANK="1", WORLD_SIZE="6")
child = ("import os, subprocess, sys, time\n"
         "if os.environ['LOCAL_RANK'] == '1':  # a DataLoader worker of its own, with its variables\n"
         "    worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
         "time.sleep(60)\n")
kids = [subprocess.Popen([sys.executable, "-c", child], env=dict(env, LOCAL_RANK=str(k))) for k in (1, 2)]
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_job_lightnings_own_launcher_started_is_found_with_its_first_rank():
    """Lightning's launcher as lightning/fabric/strategies/launchers/subprocess_script.py does it: the user's process
    (local rank 0, its variables set in-process) starts local ranks 1..N-1 with LOCAL_RANK, NODE_RANK, WORLD_SIZE and
    MASTER_* and no RANK. On node 1 of 2 with 3 processes each: ranks 3, 4, 5; rank 4's own child (a DataLoader
    worker, the same variables) is none."""
    import subprocess
    import sys

    import psutil

    parent = subprocess.Popen([sys.executable, "-c", LIGHTNING_PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while len(psutil.Process(parent.pid).children(recursive=True)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        found = disc.discover({parent.pid})
        assert len(found.jobs) == 1, found
        job = found.jobs[0]
        assert (job.key, job.launcher, job.world_size) == ("127.0.0.1:29999", "lightning", 6)
        assert [(r.rank, r.local_rank, r.node_rank) for r in job.ranks] == [(3, 0, 1), (4, 1, 1), (5, 2, 1)]
        assert job.ranks[0].pid == parent.pid and job.elsewhere() == [0, 1, 2]
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait(10)


RAY_STANDIN = """
import json, os, sys, time
session, kind, rank, pid_in_record = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
pid = os.getpid() if pid_in_record == "own" else int(pid_in_record)
if kind == "driver":  # Ray's core worker holds its driver log, named by its job id and pid
    log = open(os.path.join(session, "logs", f"python-core-driver-01000000ffff_{os.getpid()}.log"), "a")
else:  # held, as Ray Train's file handler holds it
    log = open(os.path.join(session, "logs", "train", f"ray-train-sys-worker-{os.getpid():08x}.log"), "a")
    msg = f"Setting up process group for: env:// [rank={rank}, world_size=2]"
    log.write(json.dumps({"message": msg, "process": pid, "run_name": "run-7", "world_rank": rank,
                          "local_rank": rank, "node_rank": 0}) + "\\n")
    log.flush()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_ray_train_workers_are_found_by_their_title_and_rays_record_of_them(tmp_path):
    """Stand-ins of a Ray node as Ray 2.60 lays it out: workers titled ray::RayTrainWorker that hold their system
    log open (records with their own pid), an idle pooled worker and the job's driver that inherited an sbatch
    script's rank variable, and a worker whose log is another process's. The two workers are the job's ranks;
    nothing else is. A torch rank that drives a Ray session of its own (Ray Data in a torchrun job) stays a rank."""
    import os
    import subprocess
    import sys

    session, other = tmp_path / "session_1", tmp_path / "session_2"
    for folder in (session, other):
        (folder / "logs" / "train").mkdir(parents=True)
    code = tmp_path / "standin.py"
    code.write_text(RAY_STANDIN)
    sbatch = dict(os.environ, SLURM_PROCID="0", SLURM_JOB_ID="5")

    def start(title: str, *args: str, env: dict | None = None, where=session) -> subprocess.Popen:
        return subprocess.Popen(["bash", "-c", f'exec -a "{title}" "{sys.executable}" "$@"', "-", str(code),
                                 str(where), *args], stdout=subprocess.PIPE, text=True, env=env)

    procs = [start("ray::RayTrainWorker", "worker", "0", "own"),
             start("ray::RayTrainWorker.run_train_fn", "worker", "1", "own"),
             start("ray::IDLE", "worker", "0", "own", env=sbatch),
             start("ray::RayTrainWorker", "worker", "1", "1"),
             start("python", "driver", "0", "own", env=sbatch)]
    user_of_ray_data = start("python", "driver", "0", "own", env=dict(os.environ, RANK="0", WORLD_SIZE="1",
                                                                    MASTER_ADDR="h", MASTER_PORT="1"), where=other)
    try:
        for p in [*procs, user_of_ray_data]:
            assert p.stdout.readline().strip() == "ready"
        found = disc.discover({p.pid for p in procs})
        assert len(found.jobs) == 1, found
        job = found.jobs[0]
        assert (job.key, job.launcher, job.world_size, job.master) == ("ray:run-7", "ray", 2, None)
        assert [(r.pid, r.rank, r.local_rank, r.node_rank) for r in job.ranks] == [
            (procs[0].pid, 0, 0, 0), (procs[1].pid, 1, 1, 0)]
        assert {r.thread for r in job.ranks} == {"TrainingThread("} and job.agents == []
        assert job.ranks[1].cmdline.startswith("ray::RayTrainWorker.run_train_fn ")
        both = disc.discover({p.pid for p in [*procs, user_of_ray_data]})
        assert sorted((j.key, [r.pid for r in j.ranks]) for j in both.jobs) == [
            ("h:1", [user_of_ray_data.pid]), ("ray:run-7", [procs[0].pid, procs[1].pid])]
    finally:
        for p in [*procs, user_of_ray_data]:
            p.kill()
            p.wait(10)


def test_job_keys():
    assert disc.job_key({"TORCHELASTIC_RUN_ID": "r1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}) == "r1@h:1"
    assert disc.job_key({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3"}) == "42.3"
    assert disc.job_key({"MASTER_ADDR": "h", "MASTER_PORT": "29500"}) == "h:29500"


@pytest.mark.parametrize("argv, ours", [
    (["/tmp/ddpdoctor-ci.X/venv/bin/python3", "-u", "/home/u/train.py"], False),  # a venv named after us runs ranks
    (["/opt/ddpdoctor/bin/python", "-m", "torch.distributed.run", "t.py"], False),
    (["/usr/bin/python3", "-X", "utf8", "-m", "mypkg.train", "-m", "ddpdoctor"], False),
    (["/usr/bin/python3", "-c", "import ddpdoctor"], False),
    (["/v/bin/python3", "/v/bin/ddpdoctor", "attach"], True),  # the console script
    (["/v/bin/python3", "-u", "-m", "ddpdoctor", "preflight"], True),
    (["ddpdoctor", "attach"], True),
    (["/v/bin/python3", "-u", "-m", "ddpdoctor.launch.bootstrap", "job.py"], False),  # run-trainer's rank
])
def test_another_ddpdoctor_is_known_by_the_program_it_runs_not_by_its_path(argv, ours):
    assert disc.is_ddpdoctor(argv) is ours


def test_inside_a_slurm_step_only_the_ranks_of_its_job_on_its_node_count():
    def proc(job, node, rank):
        return (None, {"SLURM_JOB_ID": job, "SLURMD_NODENAME": node, "SLURM_PROCID": str(rank)}, rank, "slurm")

    found = [proc("7", "node1", 0), proc("7", "node2", 1), proc("8", "node1", 0)]
    here = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "node1"}
    assert [f[2] for f in disc.in_own_place(found, here)] == [0]
    assert disc.in_own_place(found, {**here, "SLURMD_NODENAME": "node3"}) == []  # a node without ranks says so
    # another allocation (an salloc shell) or no SLURM at all: every rank found is kept
    assert disc.in_own_place(found, {"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "node1"}) == found
    assert disc.in_own_place(found, {}) == found


def read(rank: int, name: str | None, moved: bool = False, cpu: float | None = None,
         io: float | None = None) -> RankRead:
    if name is None:
        return RankRead(rank, 100 + rank, "n1", rank, failure=pyspy.DumpFailure.PERMISSION, error="denied")
    r = read_rank(disc.RankProcess(100 + rank, rank, rank, 4, 0, "python t.py", "u"), [dump(name), dump(name)], "n1")
    r.moved, r.cpu, r.io = moved, cpu, io
    return r


def culprits(doc: dict) -> list[tuple[int, str | None]]:
    return [(c["rank"], c["where"]) for c in doc["culprits"]]


def test_one_rank_in_its_own_code_is_the_culprit():
    doc = decide([read(0, "allreduce_waiter"), read(1, "own_code"), read(2, "allreduce_waiter")], 3)
    assert doc["category"] == "missing_rank" and culprits(doc) == [(1, "/tmp/u31rec/job.py:8")]
    assert doc["named"] == [1] and doc["culprits"][0]["host"] == "n1" and doc["culprits"][0]["function"] == "compute"
    assert sorted(c["rank"] for c in doc["consequences"]) == [0, 2] and doc["fix"]
    # stacks give no sequence id: the summary names the op alone, never a made-up "#0" of "process group 0"
    assert "all_reduce" in doc["summary"] and "#0" not in doc["summary"] and "process group" not in doc["summary"]
    assert doc["collective"]["seq"] is None


def test_the_odd_collective_is_the_desync():
    doc = decide([read(0, "allreduce_waiter"), read(1, "broadcast"), read(2, "allreduce_waiter")], 3)
    assert doc["category"] == "desync" and culprits(doc) == [(1, "/tmp/u31rec/job.py:15")] and doc["named"] == [1]
    tie = decide([read(0, "allreduce_waiter"), read(1, "broadcast")], 2)
    assert tie["category"] == "desync" and tie["named"] == [] and tie.get("no_majority")


def test_a_recv_leads_to_the_rank_that_never_sends():
    doc = decide([read(0, "recv_src1"), read(1, "own_code")], 2)
    assert doc["category"] == "missing_peer" and culprits(doc) == [(1, "/tmp/u31rec/job.py:8")]


def test_moving_waiters_are_progress_and_no_waiters_too():
    assert decide([read(0, "allreduce_waiter", moved=True), read(1, "own_code")], 2)["category"] == "progressing"
    assert decide([read(0, "own_code", moved=True), read(1, "own_code")], 2)["category"] == "progressing"


def test_every_rank_unmoved_is_never_progress():
    """Issue 37: "the job progresses: no rank waits on another" with every rank `moved: no`. Nothing moved and
    nobody waits: said as it is (warn, exit 0), no rank blamed, never "progresses"."""
    still = [read(0, "own_code", cpu=0.0), read(1, "own_code", cpu=0.0)]
    doc = decide(still, 2, watched_s=30)
    assert doc["category"] == "no_movement" and outcome_of(doc).verdict == "warn" and doc["named"] == []
    assert doc["summary"].startswith("no rank moved in 30 s; no rank waits on another") and "--wait" in doc["fix"]
    assert "none uses the CPU" in doc["summary"]
    assert undecided(still) is not None  # watched on, up to --wait, before it is said


def test_a_clear_hang_is_judged_at_once_and_a_long_step_is_watched_then_said_as_it_is():
    """Nothing moved: the rank the others wait for blocked (no CPU) is a hang, named now; the same rank using a
    core may be in a long step: watched, then "no rank moved in N s", no rank named."""
    hang = [read(0, "allreduce_waiter", cpu=0.0), read(1, "own_code", cpu=0.01), read(2, "allreduce_waiter", cpu=0.0)]
    assert motion(hang).motion is Motion.STILL and undecided(hang) is None
    doc = decide(hang, 3, watched_s=3)
    assert doc["category"] == "missing_rank" and doc["named"] == [1] and outcome_of(doc).verdict == "fail"
    long_step = [read(0, "allreduce_waiter", cpu=0.0), read(1, "own_code", cpu=0.97),
                 read(2, "allreduce_waiter", cpu=0.0)]
    assert motion(long_step).motion is Motion.UNDECIDED and "rank(s) 1 use the CPU" in undecided(long_step)
    doc = decide(long_step, 3, watched_s=30)
    assert doc["category"] == "no_movement" and doc["named"] == [] and doc["culprits"] == [] and doc["busy"] == [1]
    assert doc["summary"] == ("no rank moved in 30 s; rank(s) 0, 2 wait in all_reduce for rank(s) 1; rank 1 "
                              "computes at /tmp/u31rec/job.py:8 in compute (97 % of a core): a long step, or a hang")
    # its stack moving in its own code (a loop) is not the job moving, but it is a busy rank, not a stuck one
    # (judge.policy, issue 53): the others wait on it, watched and said, no rank named
    looping = [read(0, "allreduce_waiter", cpu=0.0), read(1, "own_code", moved=True, cpu=0.0)]
    doc = decide(looping, 2, watched_s=3)
    assert doc["category"] == "no_movement" and doc["named"] == [] and doc["busy"] == [1]
    assert "rank(s) 1 move in their own code" in doc["movement"]
    assert decide([read(0, "allreduce_waiter", cpu=0.0), read(1, "own_code", moved=True, cpu=0.9)], 2,
                  watched_s=30)["category"] == "no_movement"


def test_a_rank_reading_or_writing_while_the_others_wait_is_busy_not_the_culprit_of_a_hang():
    """Rank 0 downloads a model (HF's main_process_first) or writes a checkpoint to slow storage, its stack still and
    no CPU used while the others wait in a barrier: before the I/O rule, attach named it "never entered"."""
    downloading = [read(0, "own_code", cpu=0.0, io=190_000.0), read(1, "allreduce_waiter", cpu=0.0, io=0.0)]
    assert motion(downloading).motion is Motion.UNDECIDED
    doc = decide(downloading, 2, watched_s=30)
    assert doc["category"] == "no_movement" and doc["named"] == [] and doc["busy"] == [0], doc
    assert "rank(s) 0 read or write" in doc["movement"]
    assert "rank 0 reads or writes at /tmp/u31rec/job.py:8 in compute (0 % of a core, 186 KiB/s read and written)" \
        in doc["summary"], doc["summary"]
    stalled = [read(0, "own_code", cpu=0.0, io=2_000.0), read(1, "allreduce_waiter", cpu=0.0, io=0.0)]
    assert decide(stalled, 2, watched_s=3)["named"] == [0]  # a stack dump's bytes: still the hang's culprit


def test_the_bytes_of_a_dump_attach_asked_through_torchs_pipe_are_not_the_jobs():
    from ddpdoctor.forensics.attach.sample import Round, Sampler

    s = Sampler.__new__(Sampler)
    s.rounds = [Round(0.0, {}, {}, {7: 0}, frozenset({7})), Round(1.5, {}, {}, {7: 500_000}),
                Round(3.0, {}, {}, {7: 800_000}, frozenset({7}))]
    assert s.io_of(7, 3.0) is None  # the first round asked rank 7 for its dump: its bytes are attach's
    assert s.io_of(7, 1.5) == pytest.approx(200_000)  # a window after it: the job's own
    s.rounds[0] = Round(0.0, {}, {}, {7: 0})
    assert s.io_of(7, 3.0) == pytest.approx(800_000 / 3.0)  # the last round's request comes after its counters
    assert s.io_of(8, 3.0) is None


def test_every_rank_inside_its_wait_and_using_the_cpu_is_watched():
    """A large collective in progress (gloo reducing): every rank inside it and working is not yet a stuck
    collective; blocked in it, it is."""
    working = [read(0, "allreduce_waiter", cpu=0.6), read(1, "allreduce_waiter", cpu=0.5)]
    assert motion(working).motion is Motion.UNDECIDED
    blocked = [read(0, "allreduce_waiter", cpu=0.0), read(1, "allreduce_waiter", cpu=0.0)]
    assert decide(blocked, 2, watched_s=3)["category"] == "stuck_collective"


def test_one_sample_measures_no_movement():
    """--interval 0: whether the ranks move is not measured. Ranks in a wait are judged from the stacks (the
    snapshot asked for); ranks in their own code are not said to progress."""
    one = [read(0, "own_code", moved=None), read(1, "own_code", moved=None)]
    doc = decide(one, 2)
    assert doc["category"] == "no_movement" and "not measured" in doc["summary"] and "--interval" in doc["fix"]
    assert decide([read(0, "allreduce_waiter", moved=None), read(1, "own_code", moved=None)], 2)["named"] == [1]


def test_a_node_of_several_watches_only_while_its_own_rank_computes():
    waiters = [read(0, "allreduce_waiter", cpu=0.0), read(1, "allreduce_waiter", cpu=0.0)]
    assert undecided_here(waiters) is None
    assert undecided_here([read(2, "own_code", cpu=0.9)]) is not None
    went_through = read(2, "allreduce_waiter", moved=True, cpu=0.9)
    assert undecided_here([went_through, read(3, "own_code", cpu=0.9)]) is None


def test_the_cpu_share_counts_the_rank_and_its_children_but_no_process_that_came_or_went():
    from ddpdoctor.forensics.attach.sample import cpu_share

    assert cpu_share((0.0, {10: 5.0, 11: 1.0}), (2.0, {10: 6.0, 11: 2.0, 12: 50.0})) == pytest.approx(1.0)
    assert cpu_share((0.0, {10: 5.0, 11: 1.0}), (2.0, {10: 5.0})) == 0.0  # a child ended: no negative jump
    assert cpu_share((0.0, None), (2.0, {10: 5.0})) is None and cpu_share((1.0, {}), (1.0, {})) is None


def test_everyone_in_one_collective_names_no_culprit():
    doc = decide([read(0, "allreduce_waiter"), read(1, "allreduce_waiter")], 2)
    assert doc["category"] == "stuck_collective" and doc["named"] == [] and doc["no_culprit"] == "everyone"


def test_ranks_not_read_here_are_no_evidence_not_innocent_nor_named():
    doc = decide([read(0, "allreduce_waiter"), read(1, "allreduce_waiter")], 4)
    assert doc["named"] == [] and doc["no_evidence"] == [2, 3]
    unread = decide([read(0, "allreduce_waiter"), read(1, None)], 2)
    assert unread["named"] == [] and unread["no_evidence"] == [1]


def test_several_jobs_are_a_usage_error_listing_them():
    jobs = [disc.Job("a@h:1", "torchrun", 2, "h:1", [disc.RankProcess(1, 0, 0, 2, 0, "python a.py", "u")], 9,
                     "torchrun a.py"),
            disc.Job("b@h:2", None, 1, "h:2", [disc.RankProcess(2, 0, 0, 1, None, "python b.py", "u")])]
    with pytest.raises(UsageError, match=r"2 torch.distributed jobs.*--job a@h:1.*torchrun a.py.*--job b@h:2"):
        attach_run.choose(disc.Discovery(jobs, []), attach_run.AttachRequest())
    assert attach_run.choose(disc.Discovery(jobs, []), attach_run.AttachRequest(job="b@")).key == "b@h:2"
    with pytest.raises(NothingReadable, match="root"):
        attach_run.choose(disc.Discovery([], [77]), attach_run.AttachRequest())
    with pytest.raises(UsageError, match="no torch.distributed job"):
        attach_run.choose(disc.Discovery([], []), attach_run.AttachRequest())
    with pytest.raises(UsageError, match=r"no torch.distributed job.*Ray Train worker\(s\) 11, 12 keep no record"
                                          r".*RAY_TRAIN_V2_ENABLED=0"):
        attach_run.choose(disc.Discovery([], [], [11, 12]), attach_run.AttachRequest())


def fr_entry(seq):
    return {"collective_seq_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"],
            "profiling_name": "gloo:all_reduce", "input_sizes": [[4]], "input_dtypes": ["Float"], "is_p2p": False,
            "frames": []}


def fr_doc(enqueued, completed):
    return {"pg_status": {"0": {"last_enqueued_collective": enqueued, "last_completed_collective": completed}},
            "entries": [fr_entry(i) for i in range(1, enqueued + 1)]}


def test_the_worker_servers_flight_record_places_ranks_by_sequence_id():
    """run-trainer's workers: their flight record (sequence ids) beside py-spy's stacks."""
    from ddpdoctor.forensics.attach.sample import add_record

    waiter, late = read(0, "allreduce_waiter"), read(1, "own_code")
    add_record(waiter, fr_doc(6, 5), fr_doc(6, 5))
    add_record(late, fr_doc(5, 5), fr_doc(5, 5))
    doc = decide([waiter, late], 2)
    assert doc["named"] == [1] and "all_reduce #6" in doc["summary"] and doc["culprits"][0]["function"] == "compute"
    moving = read(0, "allreduce_waiter")
    add_record(moving, fr_doc(6, 5), fr_doc(7, 6))
    assert moving.moved and decide([moving, read(1, "allreduce_waiter")], 2)["category"] == "progressing"


def test_the_worker_socket_comes_from_run_trainers_template_and_counts_where_the_rank_listens(tmp_path):
    """The template names the socket; it is used only where the rank's own process listens on it (read from
    /proc, the path itself untouched): a file of that name, or a socket another process serves, is not."""
    import os
    import socket

    from ddpdoctor.forensics.attach import job_access

    env = {"DDPDOCTOR_WORKER_SOCKET": str(tmp_path / "{rank}.sock")}
    assert disc.worker_socket(env, 3) == str(tmp_path / "3.sock")
    assert disc.worker_socket({}, 3) is None and disc.worker_socket({"DDPDOCTOR_WORKER_SOCKET": "/x.sock"}, 3) is None
    (tmp_path / "4.sock").write_text("")
    assert not job_access.listens_on(os.getpid(), str(tmp_path / "4.sock"))
    srv = socket.socket(socket.AF_UNIX)
    try:
        srv.bind(str(tmp_path / "3.sock"))
        assert not job_access.listens_on(os.getpid(), str(tmp_path / "3.sock"))  # bound, not listening
        srv.listen(1)
        assert job_access.listens_on(os.getpid(), str(tmp_path / "3.sock"))
        assert not job_access.listens_on(os.getppid(), str(tmp_path / "3.sock"))  # another process's socket
    finally:
        srv.close()


def test_read_job_samples_every_rank_twice_with_the_tool(tmp_path):
    """read_job end to end with a stand-in py-spy that prints a recorded dump (the same both times: not moved)."""
    from ddpdoctor.forensics.attach.sample import read_job

    fake = tmp_path / "py-spy"
    fake.write_text(f"#!/bin/sh\ncat {DATA / 'own_code.txt'}\n")
    fake.chmod(0o755)
    job = disc.Job("j", "torchrun", 2, "h:1", [disc.RankProcess(1, 0, 0, 2, 0, "p", "u"),
                                              disc.RankProcess(2, 1, 1, 2, 0, "p", "u")])
    reads = read_job(job, interval=0.01, tool=str(fake), host="n1")
    assert [(r.rank, r.moved, r.state.wait.kind) for r in reads] == [(0, False, WaitKind.NONE), (1, False, WaitKind.NONE)]


def test_a_rank_moved_if_any_two_successive_rounds_differ():
    """A healthy loop's waiting rank is often at the same line with the same Work in two rounds; a third round
    that shows it elsewhere is movement. The same stack in every round is not; one readable round says nothing;
    a rank gone after a readable round ended between them."""
    rp = disc.RankProcess(100, 0, 0, 2, 0, "python t.py", "u")
    waiter = dump("allreduce_waiter")
    assert read_rank(rp, [waiter, dump("allreduce_waiter"), dump("own_code"), dump("allreduce_waiter")],
                     "n1").moved is True
    assert read_rank(rp, [dump("allreduce_waiter") for _ in range(4)], "n1").moved is False
    failed = pyspy.Dump(100, failure=pyspy.DumpFailure.PERMISSION, error="denied")
    assert read_rank(rp, [waiter, failed, failed], "n1").moved is None
    gone = pyspy.Dump(100, failure=pyspy.DumpFailure.GONE, error="gone")
    assert read_rank(rp, [waiter, dump("allreduce_waiter"), gone], "n1").moved is True
    assert read_rank(rp, [gone, failed], "n1").failure is pyspy.DumpFailure.PERMISSION  # the last word


def test_read_job_samples_in_rounds_over_the_interval(tmp_path):
    """Four rounds spread over the interval by default: a stand-in py-spy counts its calls per rank. The rank
    stands blocked ("idle") in its own code: one native read besides, to see in what (a Work.wait, a lock)."""
    from ddpdoctor.forensics.attach.sample import SAMPLES, read_job

    calls = tmp_path / "calls"
    fake = tmp_path / "py-spy"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\ncat {DATA / 'own_code.txt'}\n")
    fake.chmod(0o755)
    job = disc.Job("j", "torchrun", 1, "h:1", [disc.RankProcess(1, 0, 0, 1, 0, "p", "u")])
    start = time.monotonic()
    read_job(job, interval=0.6, tool=str(fake), host="n1")
    lines = calls.read_text().splitlines()
    assert len([x for x in lines if "--native" not in x]) == SAMPLES == 4 and time.monotonic() - start >= 0.6
    assert len([x for x in lines if "--native" in x]) == 1


def test_a_ranks_read_travels_to_the_master_as_json_with_its_flight_record():
    """Several nodes: each node's reads go to the master as JSON facts (nodes.to_fact/from_fact); its flight
    record (worker server, dump pipe) travels too, so the master places ranks by sequence id as one node would."""
    import json

    from ddpdoctor.forensics.attach import nodes
    from ddpdoctor.forensics.attach.sample import add_record

    waiter, late = read(0, "allreduce_waiter"), read(1, "own_code")
    add_record(waiter, fr_doc(6, 5), fr_doc(6, 5))
    add_record(late, fr_doc(5, 5), fr_doc(5, 5))
    wire = json.loads(json.dumps([nodes.to_fact(waiter), nodes.to_fact(late)]))
    back = [nodes.from_fact(f, "node") for f in wire]
    assert all(b.recorded is not None and b.state is not None for b in back)
    doc = decide(back, 2)
    assert doc["named"] == [1] and "all_reduce #6" in doc["summary"], doc
    # a record of the wrong shape from another node is dropped, the stack kept
    wire[0]["record"] = {"entries": "junk", "pg_status": 7}
    kept = nodes.from_fact(wire[0], "node")
    assert kept.recorded is None and kept.state is not None


def nccl_doc(enqueued, completed, version="2.28.9"):
    """An NCCL rank's record: ProcessGroupNCCL's ``nccl:`` names and its NCCL version in ``comm_lib_version``
    (torch's FlightRecorderDetail.hpp dump_json, line 515 of the 2.13.0 wheel's header)."""
    fr = fr_doc(enqueued, completed)
    for e in fr["entries"]:
        e["profiling_name"] = "nccl:all_reduce"
    return dict(fr, comm_lib_version=version)


def test_the_multi_node_master_asks_nccl_ras_once_and_fuses_it_with_the_jobs_verdict(monkeypatch):
    """Two nodes' ranks meet at the master (nodes' JSON facts); RAS JSON as NCCL 2.28.9 writes it for
    ``ncclras -f json`` (tests/unit/forensics/evidence/test_nccl_ras.py's ONE_DEAD: rank 1 missing, dead)."""
    from ddpdoctor import trust
    from ddpdoctor.forensics.attach import nodes
    from ddpdoctor.forensics.attach.sample import add_record
    from ddpdoctor.forensics.evidence import nccl_ras

    dead = {"nccl_version": "2.28.9", "communicators": [{
        "hash": "0x5a1e", "size": 2, "ranks": [{"rank": 0, "collective_counts": {"AllReduce": 6}}],
        "missing_ranks": [{"rank": 1, "host": "n2", "pid": 101, "cuda_dev": 0, "nvml_dev": 0,
                           "status": {"unresponsive": True, "considered_dead": True}}]}]}
    asked = []

    def ask(exe):
        asked.append(exe)
        return nccl_ras.parse(json.dumps(dead))

    real = nccl_ras.consult
    monkeypatch.setattr(trust, "program", lambda name: ("/usr/bin/ncclras", None))
    monkeypatch.setattr(nccl_ras, "consult", lambda *a, **k: real(*a, **dict(k, asker=ask)))
    waiter, late = read(0, "allreduce_waiter"), read(1, "own_code")
    add_record(waiter, nccl_doc(6, 5), nccl_doc(6, 5))
    add_record(late, nccl_doc(5, 5), nccl_doc(5, 5))
    facts = {"n1": [nodes.to_fact(waiter)], "n2": [nodes.to_fact(late)]}
    cluster = {"role": "master", "run_id": "r", "nodes": {
        n: {"facts": {nodes.CHECK: {"ranks": json.loads(json.dumps(f)),
                                    "job": {"world_size": 2, "launcher": "torchrun"}}}} for n, f in facts.items()}}
    doc = attach_run.cluster_doc(cluster, attach_run.AttachRequest(master="n1:29500"))
    ras = doc["diagnosis"]["ras"]
    assert doc["verdict"] == "fail" and doc["diagnosis"]["named"] == [1]
    assert len(asked) == 1 and ras["asked"] and ras["answered"] and ras["nccl_version"] == "2.28.9"
    assert ras["agrees"] and [m["rank"] for m in ras["missing"]] == [1] and ras["missing"][0]["host"] == "n2"


def test_a_records_nccl_version_travels_to_the_master_and_junk_does_not():
    """The master decides whether RAS can answer from the NCCL version the records say (older than 2.28.7: not)."""
    from ddpdoctor.forensics.attach import nodes
    from ddpdoctor.forensics.attach.sample import add_record

    r = read(0, "allreduce_waiter")
    add_record(r, dict(fr_doc(3, 2), comm_lib_version="x" * 4000), None)
    assert nodes.to_fact(r)["record"]["comm_lib_version"] == ""  # junk does not travel
    add_record(r, nccl_doc(3, 2), None)
    back = nodes.from_fact(json.loads(json.dumps(nodes.to_fact(r))), "n1")
    assert back.recorded.raw["fr"]["comm_lib_version"] == "2.28.9"


def member(pid, rank, uid, parent, world=4):
    rp = disc.RankProcess(pid, rank, rank, world, 0, "python t.py", f"user{uid}", uid=uid, gid=uid, started=1.0,
                          parent=parent)
    return rp, "torchrun", {"MASTER_ADDR": "h", "MASTER_PORT": "1"}


def test_a_job_is_one_users_tree_and_a_shared_key_is_a_clash_never_a_merge():
    """A run id is the job's own word: another user's ranks (or another launch's colliding ranks) with the same
    key are another job, said, never merged; trees whose ranks fit together (two agents of one job) are one."""
    one = disc._jobs_of("K", [member(10, 0, 1000, 5), member(11, 1, 1000, 5), member(20, 2, 1000, 6),
                               member(21, 3, 1000, 6)])
    assert len(one) == 1 and [r.rank for r in one[0].ranks] == [0, 1, 2, 3]
    two = disc._jobs_of("K", [member(10, 0, 1000, 5), member(11, 1, 1000, 5), member(20, 0, 1000, 6)])
    assert sorted(len(j.ranks) for j in two) == [1, 2]
    assert len(disc._jobs_of("K", [member(10, 0, 1000, 5), member(20, 1, 1000, 6, world=8)])) == 2
    mine = disc.Job("K", "torchrun", 2, "h:1", [disc.RankProcess(1, 0, 0, 2, 0, "p", "root", uid=0, parent=7)],
                    7, "torchrun a.py", uid=0, user="root")
    theirs = disc.Job("K", "torchrun", 2, "h:1", [disc.RankProcess(2, 0, 0, 2, 0, "p", "nobody", uid=65534,
                                                                   parent=8)], 8, "torchrun b.py", uid=65534,
                      user="nobody")
    with pytest.raises(UsageError, match=r"2 jobs share the key K .*--pid 7 .*user root.*--pid 8 .*user nobody"):
        attach_run.choose(disc.Discovery([mine, theirs], []), attach_run.AttachRequest(job="K"))


def test_stop_signals_only_the_process_discovered_and_of_the_jobs_user():
    import subprocess
    import sys

    import psutil

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = psutil.Process(p.pid)
        uid, started = proc.uids().effective, proc.create_time()
        job = disc.Job("K", "torchrun", 1, None, [], p.pid, uid=uid, agents=[(p.pid, started + 1)])
        assert attach_run.stop_job(job)["pids"] == []  # another process now has that pid
        job.agents, job.uid = [(p.pid, started)], uid + 1
        assert attach_run.stop_job(job)["pids"] == []  # not the job's user
        assert p.poll() is None
        job.uid = uid
        assert attach_run.stop_job(job)["pids"] == [p.pid] and p.wait(10) == -15
    finally:
        p.kill()
        p.wait(10)


def test_no_local_but_a_peers_rank_travels_to_the_master():
    """The store's messages are sealed, not encrypted: a rank's locals stay on its node but for the peer a
    send/recv names (the master's judge reads it), and what travels is redacted."""
    import json
    from dataclasses import replace

    from ddpdoctor.forensics.attach import nodes
    from ddpdoctor.forensics.evidence.model import Frame

    r = read(0, "allreduce_waiter")
    frames = (Frame("/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 9, "recv",
                    locals=(("src", "3"), ("tensor", "tensor([1.])"), ("dst", "'ghp_" + "a" * 36 + "'"))),
              Frame("/home/u/train.py", 5, "main", locals=(("api_key", "'sk-" + "b" * 40 + "'"),
                                                           ("password", "'hunter2hunter2'"))))
    r.state = replace(r.state, frames=frames)
    wire = json.dumps(nodes.to_fact(r))
    assert "ghp_" not in wire and "sk-" not in wire and "hunter2" not in wire and "tensor([1.])" not in wire
    back = nodes.from_fact(json.loads(wire), "node")
    assert back.state.frames[0].locals == (("src", "3"),) and back.state.wait.peer == 3


def test_read_job_watches_on_while_the_rounds_cannot_tell_and_no_longer_than_the_wait(tmp_path):
    """More rounds while ``undecided`` says why, at the window's pace, bounded by ``watch``; none once it is
    decided. The CPU share is read for every rank (here this test's own process)."""
    import os

    from ddpdoctor.forensics.attach.sample import read_job

    calls = tmp_path / "calls"
    fake = tmp_path / "py-spy"
    fake.write_text(f"#!/bin/sh\necho x >> {calls}\ncat {DATA / 'own_code.txt'}\n")
    fake.chmod(0o755)
    job = disc.Job("j", "torchrun", 1, "h:1", [disc.RankProcess(os.getpid(), 0, 0, 1, 0, "p", "u")])
    seen = []
    start = time.monotonic()
    reads = read_job(job, interval=0.3, tool=str(fake), host="n1", watch=1.2, undecided=lambda r: "a long step?",
                     progress=seen.append, native=False)
    took = time.monotonic() - start
    rounds = len(calls.read_text().splitlines())
    assert rounds > 4 and 1.0 <= took < 10 and reads[0].cpu is not None and reads[0].moved is False
    assert any("a long step?: watching up to 1.2 s (--wait)" in line for line in seen), seen
    calls.unlink()
    read_job(job, interval=0.3, tool=str(fake), host="n1", watch=30, undecided=lambda r: None, native=False)
    assert len(calls.read_text().splitlines()) == 4


def test_a_2d_mesh_seen_from_stacks_alone_names_the_stuck_rank_not_the_other_dimensions_ranks():
    """Issue 37: dp x tp (parallelize_module + FSDP2, 4 gloo ranks), rank 1 stuck in its own code; recorded with
    py-spy from the real job. Ranks 0 and 2 wait in tp's functional collective, rank 3 in FSDP's reduce_scatter
    on the dp group: subgroups, which stacks cannot match across ranks. Placed on the world group they made a
    desync of rank 3 (or, in the issue's run, ranks 0 and 2 "never entered reduce_scatter_single"); unplaced, the
    waits lead to the one rank that waits in nothing."""
    reads = []
    for rank in range(4):
        r = read(rank, f"mesh2d_rank{rank}", cpu=0.0)
        reads.append(r)
    assert [pyspy.default_group(dump(f"mesh2d_rank{r}").main_thread()) for r in range(4)] == [None, None, None, None]
    doc = decide(reads, 4, watched_s=3)
    assert doc["category"] == "missing_rank" and doc["named"] == [1], doc
    assert doc["culprits"][0]["where"].endswith("faults.py:50")
    assert sorted(c["rank"] for c in doc["consequences"]) == [0, 2, 3]


def test_the_default_group_is_read_from_what_the_caller_passed():
    """c10d's logging wrapper keeps the call's args and kwargs: a plain dist.all_reduce(t) passed no group (the
    world's); FSDP2's reduce_scatter passed its own; a repr py-spy cut says nothing."""
    assert pyspy.default_group(dump("allreduce_waiter").main_thread()) is True
    assert pyspy.default_group(dump("broadcast").main_thread()) is True  # (tensor, 0): src, not a group
    assert pyspy.default_group(dump("own_code").main_thread()) is None

    def wrapped(args: str, kwargs: str) -> bool | None:
        text = ("Thread 1 (idle): \"MainThread\"\n    all_reduce (/t/torch/distributed/distributed_c10d.py:3252)\n"
                "        Arguments:\n            tensor: <Tensor at 0x1>\n            op: <RedOpType at 0x2>\n"
                "            group: <ProcessGroup at 0x3>\n            async_op: False\n"
                "    _exception_logger.<locals>.wrapper (/t/torch/distributed/c10d_logger.py:83)\n"
                f"        Locals:\n            args: {args}\n            kwargs: {kwargs}\n    <module> (/s/job.py:9)\n")
        return pyspy.default_group(pyspy.parse(text).main_thread())

    assert wrapped("(<Tensor at 0x1>)", "{}") is True
    assert wrapped("(<Tensor at 0x1>, <RedOpType at 0x2>, <ProcessGroup at 0x3>)", "{}") is False
    assert wrapped("(<Tensor at 0x1>)", '{"group": <ProcessGroup at 0x3>}') is False
    assert wrapped("(<Tensor at 0x1>)", '{"group": None}') is True
    assert wrapped("(<Tensor at 0x1>)", '{"op": <RedOpType at 0x2>, ...}') is None


LIB = Path(__file__).parents[1] / "data" / "library_stacks"


def lib_dump(name: str) -> pyspy.Dump:
    return pyspy.parse((LIB / f"{name}.txt").read_text())


def test_native_frames_are_read_where_python_frames_stop_and_name_the_library_wait():
    """DDP's gradient all_reduce runs inside loss.backward() from C++: the Python frames stop in
    _engine_run_backward (DDP's Reducer, or the backward's own compute: not certain), so attach reads that rank's
    native frames, which show c10d::Reducer::finalize_backward. A rank in a plain all_reduce needs none; one
    blocked ("idle") in its own code gets them (a Work.wait, a lock, a sleep)."""
    from ddpdoctor.forensics.attach.sample import wants_native

    python_only, native = lib_dump("ddp_rank0"), lib_dump("ddp_rank0_native")
    assert wants_native(python_only) and not wants_native(native)
    assert not wants_native(dump("allreduce_waiter")) and wants_native(dump("own_code"))
    rp = disc.RankProcess(100, 0, 0, 2, 0, "python t.py", "u")
    guessed = read_rank(rp, [python_only, python_only], "n1")
    assert guessed.state.wait.library is not None and not guessed.state.wait.library.certain
    known = read_rank(rp, [python_only, python_only], "n1", native)
    wait = known.state.wait
    assert (wait.kind, wait.library.library, wait.library.certain) == (WaitKind.COLLECTIVE, "DDP", True)
    assert "DDP's gradient all_reduce inside loss.backward()" in wait.library.phrase
    assert known.to_json()["where"] == guessed.to_json()["where"]  # the user's line, not a C frame


def test_a_rank_computing_inside_backward_is_not_taken_to_wait():
    """Inside backward with no native frame proving DDP's wait: using a core, the rank computes (a long backward:
    watched); using none, it waits (the hang is judged)."""
    rp = disc.RankProcess(100, 0, 0, 2, 0, "python t.py", "u")
    computing = read_rank(rp, [lib_dump("ddp_rank0")] * 2, "n1")
    computing.moved, computing.cpu = False, 0.95
    other = read(1, "own_code", cpu=0.0)
    assert motion([computing, other]).motion is Motion.UNDECIDED
    computing.cpu = 0.0
    doc = decide([computing, other], 2, watched_s=3)
    assert doc["category"] == "missing_rank" and doc["named"] == [1]


def test_what_decides_movement_travels_to_the_master():
    """Several nodes: each rank's CPU share, whether it stood in a wait, and whether its collective is the default
    group's reach the master, so it decides as one node would; a bad value from the wire is dropped."""
    import json

    from ddpdoctor.forensics.attach import nodes

    waiter, busy = read(0, "allreduce_waiter", cpu=0.0), read(1, "own_code", cpu=0.93, io=70_000.0)
    wire = json.loads(json.dumps([nodes.to_fact(waiter), nodes.to_fact(busy)]))
    back = [nodes.from_fact(f, "node") for f in wire]
    assert [(b.cpu, b.waited, b.state.raw["default_group"]) for b in back] == [(0.0, True, True), (0.93, False, None)]
    assert [b.io for b in back] == [None, 70_000.0]
    assert decide(back, 2, watched_s=30)["category"] == "no_movement"
    wire[1].update(cpu=-1, waited="yes", default_group="true", io=float("inf"))
    odd = nodes.from_fact(wire[1], "node")
    assert (odd.cpu, odd.waited, odd.state.raw["default_group"], odd.io) == (None, False, None, None)


def timed_fr(enqueued: int, completed: int, created_s: list[float]) -> dict:
    doc = fr_doc(enqueued, completed)
    for entry, t in zip(doc["entries"], created_s):
        entry["time_created_ns"] = int(t * 1e9)
    return doc


def test_a_wait_far_longer_than_any_step_is_a_hang_while_every_rank_waits_and_a_busy_rank_is_not_stuck():
    """The job's own step times, where a flight record gives them: rank 0's record shows a collective every
    second for ten, and the eleventh pending for 120 s. Rank 1 spinning in its own code (a core) is busy, not
    stuck (judge.policy, issue 53): the job waits on a busy rank, said without a culprit. Rank 1 asleep there
    instead: a hang, named now. Pending for 8 s: still undecided."""
    from ddpdoctor.forensics.attach.decide import overdue_wait
    from ddpdoctor.forensics.attach.sample import add_record

    now = time.time()
    waiter, spinner = read(0, "allreduce_waiter", cpu=0.0), read(1, "own_code", cpu=0.98)
    steps = [now - 130 + i for i in range(10)] + [now - 120]
    add_record(waiter, timed_fr(11, 10, steps), timed_fr(11, 10, steps))
    add_record(spinner, timed_fr(10, 10, steps[:10]), timed_fr(10, 10, steps[:10]))
    why = overdue_wait([waiter, spinner], now)
    assert why is not None and "rank 0 has waited 120 s in all_reduce" in why and "(1.0 s)" in why
    doc = decide([waiter, spinner], 2, watched_s=3)
    assert doc["category"] == "no_movement" and doc["named"] == [] and doc["busy"] == [1]
    sleeper = read(1, "own_code", cpu=0.0)
    add_record(sleeper, timed_fr(10, 10, steps[:10]), timed_fr(10, 10, steps[:10]))
    doc = decide([waiter, sleeper], 2, watched_s=3)
    assert doc["named"] == [1] and doc["movement"] == why
    recent = [now - 18 + i for i in range(10)] + [now - 8]
    add_record(waiter, timed_fr(11, 10, recent), timed_fr(11, 10, recent))
    assert overdue_wait([waiter, spinner], now) is None
    assert decide([waiter, spinner], 2, watched_s=30)["category"] == "no_movement"


def test_a_one_node_attach_says_the_other_nodes_ranks_were_not_read_never_that_they_never_entered():
    """Issue 55 U2: attach on node1 of a 2-node job (world 4, ranks 0 and 1 here, both waiting in all_reduce) said
    "rank(s) 2, 3 never entered all_reduce": nothing was read of them. Not read is said so, in the words and the
    JSON, and the fix is to read them; the outcome stays a hang with no rank named."""
    from ddpdoctor.forensics.attach.decide import outcome_of

    doc = decide([read(0, "allreduce_waiter"), read(1, "allreduce_waiter")], 4)
    assert "never entered" not in doc["summary"] and "not read" in doc["summary"], doc["summary"]
    assert doc["summary"].startswith("rank(s) 0, 1 wait in all_reduce for rank(s) 2, 3, not read")
    assert doc["not_read"] == [2, 3] and [c["state"] for c in doc["culprits"]] == ["not read", "not read"]
    assert doc["named"] == [] and "--master" in doc["fix"] and "never reached" not in doc["fix"]
    assert "never entered" not in json.dumps(outcome_of(doc).to_json())
    # a rank read in its own code is still the one that never entered; the unread one is said apart
    mixed = decide([read(0, "allreduce_waiter"), read(1, "own_code")], 3)
    assert mixed["summary"].startswith("rank(s) 1 never entered all_reduce that rank(s) 0 wait in"), mixed["summary"]
    assert "rank(s) 2 not read" in mixed["summary"] and mixed["not_read"] == [2] and "never reached" in mixed["fix"]
