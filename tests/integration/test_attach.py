"""`ddpdoctor attach` against real torchrun jobs (gloo, 4 ranks, a 30-minute process-group timeout): it names the
rank stuck in its own code with file:line and leaves the job running; a healthy job is exit 0; the rank in another
collective is named; a job it may not read is exit 3 with the fix. Every process started is killed at the end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddpdoctor.cluster.local import free_port

pytestmark = pytest.mark.slow
JOB = Path(__file__).with_name("attach_job.py")


class Job:
    def __init__(self, tmp_path: Path, shape: str, nproc: int = 4, env: dict | None = None):
        self.dir = tmp_path
        self.nproc = nproc
        env = dict(os.environ, ATTACH_DIR=str(tmp_path), ATTACH_SHAPE=shape, OMP_NUM_THREADS="1", **(env or {}))
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
             str(free_port()), str(JOB)], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "agent.log", "wb"))

    def wait_ready(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((self.dir / f"ready{r}").exists() for r in range(self.nproc)):
                time.sleep(1.0)  # into the call the test reads them in
                return
            assert self.agent.poll() is None, (self.dir / "agent.log").read_text()[-2000:]
            time.sleep(0.5)
        pytest.fail("the job's ranks never got ready")

    def workers(self) -> list[psutil.Process]:
        return psutil.Process(self.agent.pid).children()

    def kill(self) -> None:
        """torchrun starts each worker in a session of its own: the agent's process group is not enough; every
        process of the family is killed by its id."""
        kill_family(self.agent)


def kill_family(agent: subprocess.Popen, extra: list[psutil.Process] = ()) -> None:
    try:
        procs = [*psutil.Process(agent.pid).children(recursive=True), *extra]
    except psutil.Error:
        procs = list(extra)
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(agent.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    agent.wait(30)
    psutil.wait_procs(procs, timeout=30)


@pytest.fixture
def job(tmp_path):
    made = []

    def start(shape: str) -> Job:
        j = Job(tmp_path, shape)
        made.append(j)
        j.wait_ready()
        return j

    yield start
    for j in made:
        j.kill()


def attach(*args, user: list[str] | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [*(user or []), sys.executable, "-m", "ddpdoctor", "attach", "--no-save", "--json", "--interval", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, **(env or {})))


@pytest.mark.timeout(400)
def test_a_healthy_job_is_exit_0(job):
    j = job("healthy")
    res = attach("--pid", str(j.agent.pid))
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["diagnosis"]["category"] == "progressing"


@pytest.mark.timeout(400)
def test_the_rank_in_another_collective_is_named(job):
    j = job("desync")
    res = attach("--pid", str(j.agent.pid))
    assert res.returncode == 1, res.stderr
    diag = json.loads(res.stdout)["diagnosis"]
    assert diag["category"] == "desync" and diag["named"] == [2], diag
    assert diag["culprits"][0]["where"].startswith(str(JOB)) and "broadcast" in diag["summary"]


@pytest.mark.timeout(600)
def test_the_rank_stuck_in_its_own_code_is_named_and_the_job_keeps_running(job, tmp_path):
    """One stuck job (4 ranks) for every assertion on it, in order: attach names rank 1 and leaves the job
    running; py-spy refused (a container without SYS_PTRACE, ptrace_scope 1..3) and a user who may not read the
    job are exit 3 with the fix; --stop ends the job, after the verdict."""
    j = job("stuck")
    res = attach("--pid", str(j.agent.pid))
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    diag = doc["diagnosis"]
    assert diag["category"] == "missing_rank" and diag["named"] == [1], diag
    assert diag["culprits"][0]["where"].startswith(str(JOB)) and diag["culprits"][0]["function"] == "own_compute"
    assert sorted(c["rank"] for c in diag["consequences"]) == [0, 2, 3]
    assert {diag["waits"][r]["kind"] for r in "023"} == {"collective"}
    assert j.agent.poll() is None and len(j.workers()) == 4 and all(w.is_running() for w in j.workers())

    # py-spy's own refusal
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "py-spy").write_text("#!/bin/sh\necho 'Error: Operation not permitted (os error 1)' >&2\nexit 1\n")
    (fake / "py-spy").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    res = subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--no-save", "--pid", str(j.agent.pid),
                          "--interval", "0"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "CAP_SYS_PTRACE" in res.stderr and "Traceback" not in res.stderr

    # a user who may not read the job (where the machine has one to run as)
    from tests.as_nobody import NOBODY, why_not

    if not why_not():
        res = attach("--pid", str(j.agent.pid), user=NOBODY)
        assert res.returncode == 3, res.stdout + res.stderr
        assert "sudo" in res.stderr and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert j.agent.poll() is None

    # --stop: the job ends only when asked, after the verdict
    res = attach("--pid", str(j.agent.pid), "--stop")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["diagnosis"]["named"] == [1] and doc["stopped"] == {"signal": "SIGTERM", "pids": [j.agent.pid]}
    j.agent.wait(120)  # torchrun stops its workers on SIGTERM


def _srun_env(job_id: str) -> dict:
    """What srun gives the one task it starts on node 0 of a 3-node step (`srun -N3 --ntasks-per-node=1 torchrun
    ...`): torchrun, that task, inherits SLURM_PROCID=0 and the step's variables; its workers inherit them too."""
    return {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "3", "SLURM_NNODES": "3",
            "SLURM_JOB_NODELIST": "node[1-3]", "SLURMD_NODENAME": "node1", "SLURM_STEP_NODELIST": "node[1-3]"}


@pytest.mark.timeout(400)
def test_under_srun_torchrun_the_agent_is_walked_through_never_a_rank(tmp_path):
    """Issue 45 item 1: under `srun torchrun` every node's attach took the torchrun agent (SLURM_PROCID=0, from
    srun) for rank 0 in "its own code torchrun:8", and the master said the job progresses on a job hung for
    minutes. Attach run as a user runs it inside the job's step (`srun --overlap --jobid J ddpdoctor attach`:
    its own environment names the job and the node) finds torchrun's four workers, names rank 1 at its line, and
    lists the agent as the agent."""
    job_id = f"77{os.getpid() % 100000}"
    j = Job(tmp_path, "stuck", env=_srun_env(job_id))
    try:
        j.wait_ready()
        res = attach(env=_srun_env(job_id))
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
        doc = json.loads(res.stdout)
        diag = doc["diagnosis"]
        assert diag["category"] == "missing_rank" and diag["named"] == [1], diag
        assert diag["culprits"][0]["where"].startswith(str(JOB)), diag
        assert doc["job"]["ranks_here"] == [0, 1, 2, 3] and doc["job"]["agent_pid"] == j.agent.pid, doc["job"]
        assert "torchrun" not in json.dumps(diag["culprits"]) and "torch/distributed/run.py" not in json.dumps(diag)
    finally:
        j.kill()
