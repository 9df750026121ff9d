"""ddpdoctor under a real SLURM (tests/slurm_cluster.py: slurmctld + three slurmd in network namespaces), run as
users type it: `srun ... ddpdoctor preflight`, the sbatch script that forgets srun, `srun ... ddpdoctor
run-trainer` with the reference trainer and with a script whose rank on node 3 hangs, and one node whose
firewall drops the master port; `srun torchrun` jobs hung (attach), then stopped by scancel or their time limit,
or one rank killed with SIGKILL (postmortem, run-trainer). One cluster for the module (bring-up under a second);
nothing is left behind."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.slurm_cluster import SlurmCluster, running, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

BIN = os.path.dirname(sys.executable)  # the venv's ddpdoctor, on PATH as in the user's shell
FAST = ["--n-layer", "1", "--n-embd", "32", "--batch-size", "4", "--block-size", "32", "--log-every", "5"]


def user_env(cluster: SlurmCluster) -> dict:
    return cluster.env(PATH=f"{BIN}:{os.environ.get('PATH', '')}")


@pytest.mark.timeout(90)
def test_teardown_leaves_nothing_behind_even_when_the_test_fails():
    """A cluster with a job step running when the test body raises: no daemon, task, namespace, bridge, mount
    or temp dir survives. (Runs before the module's cluster exists: the controller port is one per machine.)"""
    if unavailable():
        pytest.skip(unavailable())
    cluster = SlurmCluster()
    job = None
    with pytest.raises(RuntimeError, match="the test failed"):
        with cluster:
            job = subprocess.Popen(["srun", "-N3", "--ntasks-per-node=1", "sleep", "300"], env=cluster.env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            cluster._wait(lambda: not cluster.all_idle(), 20, "the job to start")
            assert any(Path(cluster.tmp).iterdir())
            raise RuntimeError("the test failed")
    # the srun client is the test's own process (the login node's): it keeps retrying a controller that is gone
    job.kill()
    job.wait(timeout=10)
    assert cluster.leftovers() == []


@pytest.fixture(scope="module")
def slurm():
    with running(SlurmCluster()) as cluster:
        yield cluster


def srun(cluster: SlurmCluster, *argv: str, timeout: float, cwd: str | None = None) -> subprocess.CompletedProcess:
    cluster.wait_idle()
    return cluster.run(["srun", "-N3", "--ntasks-per-node=1", *argv], timeout=timeout, env=user_env(cluster), cwd=cwd)


def problems(doc: dict) -> list[dict]:
    return [r for r in doc["results"] if r["level"] in ("warn", "fail")]


@pytest.mark.timeout(150)
def test_srun_preflight_healthy_cluster_passes_with_one_summary(slurm, tmp_path):
    out = tmp_path / "out"
    p = srun(slurm, "ddpdoctor", "preflight", "--master", "node1:29555", "-o", str(out), timeout=130)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    docs = {f.name: json.loads(f.read_text()) for f in out.glob("*.json")}
    assert set(docs) == {"cluster.json", "node-node2.json", "node-node3.json"}, sorted(docs)
    assert all(d["exit_code"] == 0 for d in docs.values())
    cluster = docs["cluster.json"]
    assert sorted(cluster["nodes"]) == ["node1", "node2", "node3"]
    # Nothing the launcher sets (SLURM_GTIDS, SLURM_NODEID, SLURMD_NODENAME...) is a finding. The only warning
    # allowed is this machine's own unsynchronised clock, which a real cluster would have too.
    assert [r["summary"] for r in problems(cluster) if r["check"] != "clock-sync"] == []
    assert "SLURM_" not in json.dumps(problems(cluster))
    # a worker's JSON still holds everything the master decided
    assert docs["node-node2.json"]["results"][:len(cluster["results"])] == cluster["results"]
    # one summary per cluster in srun's merged stdout: the master's, and one line from each other node
    assert p.stdout.count("ddpdoctor preflight [cluster: 3 nodes]") == 1, p.stdout
    for node in ("node2", "node3"):
        (line,) = [ln for ln in p.stdout.splitlines() if f"[{node}] cluster verdict:" in ln]
        assert f"node1 printed the full summary and wrote the cluster result to {out}/cluster.json" in line
        assert "(exit 0," in line


@pytest.mark.timeout(120)
def test_sbatch_script_without_srun_names_the_missing_hosts_and_srun(slurm, tmp_path):
    """The body of an sbatch script runs on the first node only: the preflight there waits for the two other
    nodes, names them, and says to start it with srun."""
    script = tmp_path / "job.sh"
    script.write_text(textwrap.dedent("""\
        #!/bin/sh
        #SBATCH -N 3
        #SBATCH --ntasks-per-node=1
        ddpdoctor preflight --master node1:29556 --timeout 10
        echo "exit=$?"
        """))
    log = tmp_path / "job.log"
    slurm.wait_idle()
    p = slurm.run(["sbatch", "--wait", "-o", str(log), str(script)], timeout=100, env=user_env(slurm),
                  cwd=str(tmp_path))
    text = log.read_text()
    assert "exit=3" in text, p.stderr + text
    error = next(ln for ln in text.splitlines() if ln.startswith("Error:"))
    assert "missing rank(s) 1, 2 = host(s) node[2-3] (listed in SLURM_JOB_NODELIST, never joined)" in error, text
    assert "an sbatch script runs on the first node only" in error and "`srun --ntasks-per-node=1 ddpdoctor" in error


@pytest.mark.timeout(150)
def test_a_node_whose_firewall_drops_the_master_port_is_named(slurm, tmp_path):
    rule = ["iptables", "-A", "OUTPUT", "-p", "tcp", "--dport", "29557", "-j", "DROP"]
    slurm.in_node(3, *rule)
    try:
        # 30 s to meet: on a loaded 2-core CI the other nodes' start (a torch import each) can take 10 s, and then
        # the master rightly names them too ("1/3 nodes joined")
        p = srun(slurm, "ddpdoctor", "preflight", "--master", "node1:29557", "--timeout", "30", timeout=110)
    finally:
        slurm.in_node(3, "iptables", "-D", *rule[2:])
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    # the master (and node2, told by it) name node3 as the node that never joined, without sbatch advice
    master = [e for e in errors if "2/3 nodes joined node1:29557" in e]
    assert master and all("missing rank(s) 2 = host(s) node3" in e for e in master), errors
    assert all("never reached node1:29557: check their firewall" in e and "sbatch" not in e for e in master)
    # node3 says it cannot reach the master, and how
    assert any(e.startswith("Error: cannot reach the master node1:29557") for e in errors), errors


@pytest.mark.timeout(150)
@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs Open MPI's mpiexec (openmpi-bin)")
def test_mpiexec_preflight_across_the_same_nodes_passes_with_one_summary(slurm, tmp_path):
    """Open MPI's mpiexec starts its daemons through an rsh agent; here the agent enters the node's namespaces
    instead of ssh. Open MPI's own per-process variables (OMPI_COMM_WORLD_RANK, OMPI_FILE_LOCATION, the local
    daemon's URI...) are no parity finding."""
    out = tmp_path / "out"
    p = slurm.run(["mpiexec", "--allow-run-as-root", "--host", "node1,node2,node3", "-np", "3", "--map-by",
                   "ppr:1:node", "--mca", "plm_rsh_agent", str(slurm.rsh_agent()),
                   "ddpdoctor", "preflight", "--master", "node1:29561", "-o", str(out)],
                  timeout=130, env=user_env(slurm))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    cluster = json.loads((out / "cluster.json").read_text())
    assert sorted(cluster["nodes"]) == ["node1", "node2", "node3"]
    assert [r["summary"] for r in problems(cluster) if r["check"] != "clock-sync"] == []
    env_vars = cluster["nodes"]["node2"]["facts"]["env-vars"]["vars"]
    assert env_vars["OMPI_COMM_WORLD_RANK"] == "1" and "OMPI_FILE_LOCATION" in env_vars  # they were compared
    shown = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout)  # mpiexec hands its ranks a terminal: rich colours
    assert shown.count("ddpdoctor preflight [cluster: 3 nodes]") == 1, shown
    assert all(f"[{n}] cluster verdict:" in shown for n in ("node2", "node3"))


TRAINER = ["ddpdoctor", "run-trainer", "--nnodes", "3", "--nproc-per-node", "1"]


@pytest.mark.timeout(240)
def test_srun_run_trainer_reference_trainer_passes_on_three_nodes(slurm, tmp_path):
    run_dir = tmp_path / "runs"
    p = srun(slurm, *per_task(tmp_path), *TRAINER, "--master", "node1:29558", "--run-dir", str(run_dir), "--json",
             "--", "--steps", "10", *FAST, timeout=220)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    docs = _task_documents(tmp_path)
    assert len(docs) == 3 and all(d["verdict"] == "pass" for d in docs), [d.get("verdict") for d in docs]
    assert all(sorted(d["metrics"]) == ["0", "1", "2"] for d in docs)
    assert all(d["checksums_equal"] is True for d in docs)
    # each node knows its node rank from torch's rendezvous: node rank 0 prints the full result (terminal)
    assert sorted(d["node"]["node_rank"] for d in docs) == [0, 1, 2], [d.get("node") for d in docs]


HANGS_ON_NODE3 = """\
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(10_000):
    if step == 3 and os.environ.get("SLURMD_NODENAME") == "node3":
        while True:  # the bug: this rank stops calling the collective
            time.sleep(1)
    t = torch.ones(4)
    dist.all_reduce(t)
    time.sleep(0.05)
"""


@pytest.mark.timeout(240)
def test_srun_run_trainer_user_script_hanging_on_node3_is_named_by_every_node(slurm, tmp_path):
    script = tmp_path / "train_hangs.py"
    script.write_text(HANGS_ON_NODE3)
    run_dir = tmp_path / "runs"
    p = srun(slurm, *per_task(tmp_path), *TRAINER, "--master", "node1:29559", "--run-dir", str(run_dir), "--json",
             "--no-preflight", "--hang-timeout", "8", "--", str(script), timeout=220)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    docs = _task_documents(tmp_path)
    assert len(docs) == 3, p.stdout[-3000:]
    for doc in docs:
        rc = doc["root_cause"]
        assert rc["category"] == "hang" and rc["rank"] == 2 and rc["host"] == "node3", rc
        assert (rc.get("location") or "").endswith("train_hangs.py:11"), rc  # its line: the sleep it never leaves


CHECKPOINTS_ON_USR1 = """\
import os
import signal
import time

import torch
import torch.distributed as dist

asked = []
signal.signal(signal.SIGUSR1, lambda s, f: asked.append(s))  # Lightning's SLURM requeue handler does this
dist.init_process_group("gloo")
open(os.path.join(os.environ["READY_DIR"], "ready%d" % dist.get_rank()), "w").close()
for step in range(60):
    dist.all_reduce(torch.ones(4))
    time.sleep(0.3)
print("rank %d: %d checkpoint request(s)" % (dist.get_rank(), len(asked)), flush=True)
"""


@pytest.mark.timeout(300)
def test_scancel_signal_usr1_to_srun_run_trainer_reaches_the_ranks_and_stops_nothing(slurm, tmp_path):
    """`scancel --signal=USR1 JOB` (what `--signal=USR1@90` does before a time limit): SLURM signals every process
    of the step, run-trainer, torchrun and the ranks. Before: run-trainer and torchrun died of it (no handler) and
    took the job along; now each rank's handler runs and the job passes on every node."""
    script = tmp_path / "checkpoints.py"
    script.write_text(CHECKPOINTS_ON_USR1)
    env = user_env(slurm)
    env.update(READY_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    slurm.wait_idle()
    job = subprocess.Popen(["srun", "-N3", "--ntasks-per-node=1", "--job-name", "usr1", *per_task(tmp_path), *TRAINER,
                            "--master", "node1:29563", "--run-dir", str(tmp_path / "runs"), "--json",
                            "--no-preflight", "--", str(script)], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=open(tmp_path / "job.err", "wb"))
    with _running(slurm, job, "usr1", tmp_path, ranks=3, limit=150) as jobid:
        sent = subprocess.run(["scancel", "--signal=USR1", jobid], env=slurm.env(), timeout=30, capture_output=True,
                              text=True)
        assert sent.returncode == 0, sent.stderr
        assert job.wait(timeout=150) == 0, _outputs(tmp_path)
    docs = _task_documents(tmp_path)
    assert len(docs) == 3 and all(d["verdict"] == "pass" for d in docs), [d.get("root_cause") for d in docs]
    said = "".join(f.read_text() for f in tmp_path.glob("task-*.err"))
    for rank in range(3):
        assert f"rank {rank}: 1 checkpoint request(s)" in said, said[-3000:]


ATTACH_JOB = Path(__file__).with_name("attach_job.py")


@pytest.fixture
def srun_job_stuck_on_node2(slurm, tmp_path):
    """A job srun starts itself (no torchrun: the rank is SLURM_PROCID), gloo, a 30-minute timeout; rank 1, on
    node2, is stuck in its own code. Yields the job id once every rank stands where the test reads it."""
    env = user_env(slurm)
    env.update(ATTACH_DIR=str(tmp_path), ATTACH_SHAPE="stuck", MASTER_ADDR="node1", MASTER_PORT="29562",
               OMP_NUM_THREADS="1")
    slurm.wait_idle()
    job = subprocess.Popen(["srun", "-N3", "--ntasks-per-node=1", "--job-name", "stuck", sys.executable,
                            str(ATTACH_JOB)], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=open(tmp_path / "job.err", "wb"))
    with _running(slurm, job, "stuck", tmp_path, ranks=3, limit=150) as jobid:
        yield jobid, job


@contextlib.contextmanager
def _running(slurm, job: subprocess.Popen, name: str, where: Path, ranks: int, limit: float):
    """The job id once every rank has written its ready file (and stands in the call the test reads); scancel
    and the srun client reaped at the end, whatever happened."""
    try:
        deadline = time.monotonic() + limit
        while not all((where / f"ready{r}").exists() for r in range(ranks)):
            assert job.poll() is None and time.monotonic() < deadline, _outputs(where)
            time.sleep(0.5)
        time.sleep(1.0)  # into the call the test reads them in
        ids = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True,
                             timeout=30, env=slurm.env()).stdout.split()
        assert len(ids) == 1, ids
        yield ids[0]
    finally:
        subprocess.run(["scancel", "--name", name], env=slurm.env(), timeout=30, capture_output=True)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=10)


@pytest.mark.timeout(300)
def test_srun_overlap_attach_names_the_stuck_rank_its_node_and_line(slurm, srun_job_stuck_on_node2, tmp_path):
    """Issue 31 as users type it: `srun --overlap --jobid J -N3 --ntasks-per-node=1 ddpdoctor attach --master`
    beside a running job; the nodes meet, each reads only its own node's rank, the master names rank 1 on node2
    at its line, and the job is still running afterwards."""
    jobid, job = srun_job_stuck_on_node2
    out = tmp_path / "attach"
    out.mkdir()
    started = time.monotonic()
    master = _attach_on_every_node(slurm, jobid, out, "node1:29563")
    took = time.monotonic() - started
    _rank_1_on_node2_named(master, job)
    assert took < 120, took  # the 15 s figure of issue 31 is measured by tests/benchmarks/bench_attach.py --slurm


def _rank_1_on_node2_named(master: dict, job: subprocess.Popen) -> None:
    """attach's master document of the 3-node job whose rank 1 (node2) is stuck in own_compute: rank 1 named at
    its line, each node's own rank read once, the job left running."""
    diag = master["diagnosis"]
    assert diag["category"] == "missing_rank" and diag["named"] == [1], diag
    culprit = diag["culprits"][0]
    assert culprit["host"] == "node2" and culprit["where"].startswith(str(ATTACH_JOB)), culprit
    assert culprit["function"] == "own_compute", culprit
    assert sorted((r["rank"], r["host"]) for r in master["ranks"]) == [(0, "node1"), (1, "node2"), (2, "node3")]
    assert job.poll() is None, "attach must leave the job running"


def _attach_on_every_node(slurm, jobid: str, out: Path, master: str, results: Path | None = None) -> dict:
    """`srun --overlap --jobid J -N3 --ntasks-per-node=1 ddpdoctor attach --master M` beside the job, as users type
    it: exit 1 (a hang named) and the master's document. ``results``: kept there (RESULTS/J/attach.json, the run
    id srun's SLURM_JOB_ID), as by default in the working directory; else not kept."""
    keep = ["--results-dir", str(results)] if results is not None else ["--no-save"]
    env = user_env(slurm)
    if results is not None:
        env.pop("DDPDOCTOR_NO_SAVE", None)  # the suite's own default: kept nowhere
    p = slurm.run(["srun", "--overlap", "--jobid", jobid, "-N3", "--ntasks-per-node=1", *per_task(out),
                   "ddpdoctor", "attach", "--master", master, "--json", *keep, "--interval", "2"],
                  timeout=240, env=env)
    docs = _task_documents(out)
    errs = "".join(f.read_text()[-1500:] for f in sorted(out.glob("task-*.err")))
    assert p.returncode == 1 and len(docs) == 3, (p.returncode, p.stderr[-2000:], errs)
    return next(d for d in docs if d.get("role") == "master")


def _outputs(where: Path) -> str:
    """What srun and each task printed (per_task's files): why a job ended before its ranks were ready."""
    said = [(where / "job.err").read_text()[-3000:]] if (where / "job.err").exists() else []
    for path in sorted(where.glob("task-*"))[:8]:
        said.append(f"--- {path.name} ---\n" + path.read_text(errors="replace")[-2000:])
    return "\n".join(said)


def per_task(where) -> list[str]:
    """srun's options giving each task its own stdout and stderr files."""
    return [f"--output={where}/task-%t.json", f"--error={where}/task-%t.err"]


def _task_documents(where) -> list[dict]:
    """Each task's --json document. srun merges the tasks' stdout line by line, so three multi-line documents
    interleave: as a user would, the tests give each task its own files (srun --output=DIR/task-%t.json and
    --error: without it srun writes stderr into the --output file too)."""
    files = sorted(where.glob("task-*.json"))
    return [json.loads(f.read_text()) for f in files]


def srun_torchrun(slurm, where: Path, name: str, nproc: int, port: int, shape: str = "stuck",
                  srun_opts: tuple = (), merged: bool = False, **job_env: str) -> subprocess.Popen:
    """`srun -N3 --ntasks-per-node=1 [srun_opts] torchrun --nnodes 3 --nproc-per-node NPROC ...` as torchtitan's and
    most SLURM templates start a job: one torchrun agent per node (with srun's SLURM_PROCID), its workers the ranks
    (attach_job.py in ``shape``), their logs in a shared --log-dir (``where``/logs), each agent's own output in its
    srun --error file (``where``/agents/task-<node>.err), or with ``merged`` every task's output in srun's own
    stderr, ``where``/job.err, as `srun ... 2> FILE` or sbatch's slurm-<job>.out has it. The srun client; one job
    per node count and shape, the same code (no job changes its shape)."""
    env = user_env(slurm)
    env.update(ATTACH_DIR=str(where), ATTACH_SHAPE=shape, OMP_NUM_THREADS="1", **job_env)
    (where / "agents").mkdir()
    slurm.wait_idle()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "3", "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"node1:{port}", "--redirects", "3", "--log-dir",
                str(where / "logs"), str(ATTACH_JOB)]
    return subprocess.Popen(["srun", "-N3", "--ntasks-per-node=1", "--job-name", name, *srun_opts,
                             *(() if merged else per_task(where / "agents")), *torchrun],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(where / "job.err", "wb"))


@pytest.fixture
def srun_torchrun_job_stuck(slurm, tmp_path):
    """srun_torchrun with two ranks per node; rank 1 (node1's second worker) is stuck in its own code. Yields (job
    id, the srun client, the log dir, the folder of the agents' outputs)."""
    job = srun_torchrun(slurm, tmp_path, "stuck-tr", nproc=2, port=29564)
    with _running(slurm, job, "stuck-tr", tmp_path, ranks=6, limit=180) as jobid:
        yield jobid, job, tmp_path / "logs", tmp_path / "agents"


@pytest.mark.timeout(420)
def test_srun_torchrun_hung_attach_names_the_rank_then_scancel_and_postmortem_say_the_stop(
        slurm, srun_torchrun_job_stuck, tmp_path):
    """Issue 45 items 1 and 3 on the real scheduler. attach took each torchrun agent (SLURM_PROCID from srun) for a
    rank and the master said "the job progresses ... exit 0" on a job hung for minutes: now every node's attach
    walks through the agent to its two workers, and the master names rank 1 at its line. Then scancel (SIGTERM to
    every process of the step at once): postmortem of the log dir said "pass", exit 0; now, from the log dir alone,
    "not verified" (exit 5, or no rank named: assert_never_an_innocent), and with an agent's own output, the stop
    from outside (exit 1)."""
    jobid, job, logs, agents = srun_torchrun_job_stuck
    out = tmp_path / "attach"
    out.mkdir()
    results = tmp_path / "ddpdoctor-results"
    master = _attach_on_every_node(slurm, jobid, out, "node1:29565", results=results)
    diag = master["diagnosis"]
    assert diag["category"] == "missing_rank" and diag["named"] == [1], diag
    assert diag["culprits"][0]["function"] == "own_compute" and diag["culprits"][0]["host"] == "node1", diag
    ranks = sorted((r["rank"], r["host"]) for r in master["ranks"])
    assert [r for r, _ in ranks] == list(range(6)), ranks  # six workers, no agent among them
    assert job.poll() is None, "attach must leave the job running"

    scancel = subprocess.run(["scancel", jobid], env=slurm.env(), timeout=30, capture_output=True, text=True)
    assert scancel.returncode == 0, scancel.stderr
    job.wait(timeout=90)
    code, doc = postmortem(logs)
    assert_never_an_innocent(code, doc)
    agent_log = next(f for f in sorted(agents.glob("task-*.err")) if "SIGTERM" in f.read_text(errors="replace"))
    code, doc = postmortem(logs, "--agent-log", agent_log)
    rc = doc["root_cause"]
    assert code == 1 and doc["verdict"] == "fail", (code, rc)
    assert rc["error_type"] in ("stopped_from_outside", "stopped_while_hung") and "SIGTERM" in rc["message"], rc
    assert rc["rank"] in (None, 1), rc  # never an innocent rank
    # Issue 55 U1: what attach saved on this job (RESULTS/<job id>/attach.json) is evidence for its postmortem: the
    # rank it named, at its line, said as attach's; from the log dir alone and with torchrun's output (the stop)
    assert (results / jobid / "attach.json").is_file(), sorted(p.name for p in (results / jobid).iterdir())
    for extra in ((), ("--agent-log", agent_log)):
        code, doc = postmortem(logs, *extra, "--run-id", jobid, "--results-dir", results)
        rc = doc["root_cause"]
        assert code == 1 and doc["culprit_ranks"] == [1], (extra, rc)  # was exit 5, or no rank named
        if rc["error_type"] == "hung_when_attached":  # else the logs named rank 1 themselves (it alone was silent)
            assert rc["host"] == "node1" and "named by `ddpdoctor attach`" in rc["message"], rc
            assert not extra or "stopped from outside (SIGTERM)" in rc["message"], rc["message"]


def postmortem(logs: Path, *args) -> tuple[int, dict]:
    """`ddpdoctor postmortem LOGS ARGS --json --no-save`: its exit code and document."""
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "postmortem", str(logs), *map(str, args), "--json",
                        "--no-save"], capture_output=True, text=True, timeout=120)
    assert p.stdout.startswith("{"), p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout)


def assert_never_an_innocent(code: int, doc: dict) -> None:
    """A hung job stopped from outside, from its log dir alone: "not verified" (exit 5). Or, where a rank's collective
    broke as the stop reached a peer first ("Connection closed by peer"), the others silent: exit 1 and no rank
    named, or rank 1 when it alone is silent (the log dir cannot tell that stop from a kill -9). Never a pass, never
    a rank that waited."""
    assert code in (1, 5) and doc["verdict"] != "pass" and doc["culprit_ranks"] in ([], [1]), (code, doc["root_cause"])
    if code == 1:
        assert any(c["category"] == "peer_lost" for c in doc["consequences"]), doc["consequences"]


@pytest.mark.timeout(300)
def test_srun_torchrun_one_rank_per_node_hung_attach_names_it_then_the_time_limit_and_postmortem_say_the_stop(
        slurm, tmp_path):
    """Issue 45 on the real scheduler, one rank per node (`srun -N3 torchrun --nproc-per-node 1`), rank 1 on node2
    stuck in its own code: attach on every node names rank 1 on node2 at its line. Then the job's time limit stops it:
    slurmctld checks limits every 30 s and a limit is whole minutes, so the job runs under `--time=10` and its limit
    is cut to 1 minute once attach is done (`scontrol update TimeLimit=1`: an attach slowed by a loaded machine is
    never cut short by the stop it precedes); SIGTERM reaches every process of the step at once, SIGKILL after
    KillWait. Each rank dumps its flight record on the SIGTERM (TORCH_FR_DUMP_TEMP_FILE). postmortem: never "pass";
    from the log dir alone "not verified" (exit 5; assert_never_an_innocent); with torchrun's output (a node's srun --error file) the stop from
    outside (each node's); with the dumps, rank 1, the rank the others waited for."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    started = time.monotonic()
    job = srun_torchrun(slurm, tmp_path, "timed", nproc=1, port=29566, srun_opts=("--time=10",),
                        ATTACH_DUMP_ON_SIGTERM="1", TORCH_FR_BUFFER_SIZE="200",
                        TORCH_FR_DUMP_TEMP_FILE=f"{dumps}/rank_")
    with _running(slurm, job, "timed", tmp_path, ranks=3, limit=150) as jobid:
        out = tmp_path / "attach"
        out.mkdir()
        master = _attach_on_every_node(slurm, jobid, out, "node1:29567")
        _rank_1_on_node2_named(master, job)
        update = subprocess.run(["scontrol", "update", f"JobId={jobid}", "TimeLimit=1"], env=slurm.env(), timeout=30,
                                capture_output=True, text=True)
        assert update.returncode == 0, update.stderr
        job.wait(timeout=150)  # at slurmctld's first limit check past a minute from the start
        lasted = time.monotonic() - started
    agents = sorted((tmp_path / "agents").glob("task-*.err"))
    said = "".join(f.read_text(errors="replace") for f in agents)
    assert "DUE TO TIME LIMIT" in said, said[-3000:]  # slurmstepd's word: the limit, not the test's scancel
    assert sorted(p.name for p in dumps.iterdir()) == ["rank_0", "rank_1", "rank_2"], said[-3000:]
    logs = tmp_path / "logs"

    code, doc = postmortem(logs)
    assert_never_an_innocent(code, doc)
    if code == 5:
        assert "3 rank(s) in the logs" in doc["root_cause"]["message"], doc["root_cause"]  # every node's folder read
    for agent in agents:  # each node's torchrun output
        code, doc = postmortem(logs, "--agent-log", agent)
        rc = doc["root_cause"]
        assert code == 1 and rc["error_type"] == "stopped_from_outside", (agent.name, code, rc)
        assert "SIGTERM" in rc["message"] and rc["rank"] is None, rc
    # with the dumps, rank 1: "stopped while hung" (from the dumps alone, "missing_rank" where a rank's collective
    # broke as the stop reached a peer first: that failure, not a stop, is then what the log dir records)
    for args, said in ((("--fr-dir", dumps), ("stopped_while_hung", "missing_rank")),
                       (("--agent-log", agents[1], "--fr-dir", dumps), ("stopped_while_hung",))):
        code, doc = postmortem(logs, *args)
        rc = doc["root_cause"]
        assert code == 1 and rc["error_type"] in said and rc["rank"] == 1, (args, code, rc)
        assert doc["culprit_ranks"] == [1], (args, doc["culprit_ranks"])
    print(f"job lasted {lasted:.0f} s")


@pytest.mark.timeout(240)
def test_srun_torchrun_rank_killed_9_from_outside_is_named_with_its_signal(slurm, tmp_path):
    """Issue 45: one rank of `srun -N3 torchrun --nproc-per-node 1` killed with SIGKILL from outside mid-training, as
    the OOM killer does; the others' collectives break ("Connection closed by peer") and each torchrun ends. No
    error file, no traceback for the killed rank. postmortem of the log dir: never exit 0 and never a rank that
    only waited; with torchrun's output (srun's merged stderr: every node's torchrun), rank 1 and SIGKILL."""
    job = srun_torchrun(slurm, tmp_path, "killed", nproc=1, port=29568, shape="healthy", merged=True)
    with _running(slurm, job, "killed", tmp_path, ranks=3, limit=150):
        os.kill(int((tmp_path / "ready1").read_text()), signal.SIGKILL)  # one PID namespace: the node's process
        assert job.wait(timeout=120) != 0
    logs, merged = tmp_path / "logs", tmp_path / "job.err"
    code, doc = postmortem(logs)
    assert code in (1, 5) and doc["verdict"] != "pass", (code, doc["root_cause"])
    assert doc["culprit_ranks"] in ([], [1]), doc["root_cause"]
    code, doc = postmortem(logs, "--agent-log", merged)
    rc = doc["root_cause"]
    assert code == 1 and rc["rank"] == 1 and rc["signal"] == "SIGKILL", (code, rc)
    assert doc["culprit_ranks"] == [1], doc["culprit_ranks"]


@pytest.mark.timeout(240)
def test_srun_run_trainer_rank_killed_9_from_outside_is_named_by_every_node(slurm, tmp_path):
    """The same kill -9 under `srun -N3 ddpdoctor run-trainer --nproc-per-node 1`: every node names rank 1 and
    SIGKILL, never a rank that only waited, never exit 0."""
    env = user_env(slurm)
    env.update(ATTACH_DIR=str(tmp_path), ATTACH_SHAPE="healthy", OMP_NUM_THREADS="1")
    slurm.wait_idle()
    job = subprocess.Popen(["srun", "-N3", "--ntasks-per-node=1", "--job-name", "killed-rt", *per_task(tmp_path),
                            *TRAINER, "--master", "node1:29569", "--run-dir", str(tmp_path / "runs"), "--json",
                            "--no-preflight", "--", str(ATTACH_JOB)], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=open(tmp_path / "job.err", "wb"))
    with _running(slurm, job, "killed-rt", tmp_path, ranks=3, limit=150):
        os.kill(int((tmp_path / "ready1").read_text()), signal.SIGKILL)
        assert job.wait(timeout=150) != 0
    docs = _task_documents(tmp_path)
    assert len(docs) == 3, (tmp_path / "job.err").read_text()[-3000:]
    for doc in docs:
        rc = doc["root_cause"]
        assert doc["exit_code"] != 0 and rc["rank"] == 1 and rc["signal"] == "SIGKILL", rc
        assert doc["culprit_ranks"] == [1], doc["culprit_ranks"]
