"""`ddpdoctor attach` on jobs built on torch's libraries, where the ranks wait inside the library rather than in a
torch.distributed call of their own (issue 37). One DDP job under plain torchrun (2 gloo ranks, a 30-minute
process-group timeout; tests/integration/attach_job.py, shape `ddp`) serves the first test's assertions, in order:

1. rank 1 takes a long step (10 s of CPU in its own code) while rank 0 waits in DDP's Reducer: attach sees
   nothing move but rank 1 computing, watches, and says the job progresses when rank 0 moves (never a hang);
2. rank 1 hangs before its backward (asleep in its own code): attach names it at once, with rank 0's wait named
   as DDP's gradient all_reduce from its native frames, shows its sampling on stderr and keeps attach.json.

Then two of the forensics suite's library jobs (tests/integration/library_jobs/): a pipeline stage stuck in its
forward, and a Lightning job its own launcher started. The whole matrix: tests/benchmarks/bench_attach_libraries.py.
Every process started is killed by its id at the end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.cluster.local import free_port
from tests.integration.test_attach import kill_family

pytestmark = pytest.mark.slow
JOB = Path(__file__).with_name("attach_job.py")
LONG_S = 10.0


def wait_for(paths: list[Path], agent: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert agent.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, f"the job never reached {[p.name for p in paths]}"
        time.sleep(0.2)


@pytest.mark.timeout(600)
def test_a_ddp_job_long_step_is_no_hang_and_its_hang_before_backward_is_named(tmp_path):
    env = dict(os.environ, ATTACH_DIR=str(tmp_path), ATTACH_SHAPE="ddp", ATTACH_LONG_S=str(LONG_S),
               OMP_NUM_THREADS="1")
    log = tmp_path / "agent.log"
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                              "--master-port", str(free_port()), str(JOB)], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    base = [sys.executable, "-m", "ddpdoctor", "attach", "--pid", str(agent.pid), "--interval", "2"]
    try:
        # 1. the long step: rank 1 computes in its own code, rank 0 waits inside loss.backward()
        wait_for([tmp_path / "long1"], agent, log)
        started = time.monotonic()
        res = subprocess.run([*base, "--json", "--no-save", "--wait", "60"], capture_output=True, text=True,
                             timeout=180)
        took = time.monotonic() - started
        doc = json.loads(res.stdout)
        assert res.returncode == 0 and doc["diagnosis"]["category"] == "progressing", (res.stderr, doc["diagnosis"])
        assert doc["verdict"] == "pass" and res.stderr == ""  # --json: no progress lines
        assert doc["watched_s"] > 2.5 and took < 60, (doc["watched_s"], took)  # it watched until rank 0 moved

        # 2. the hang before backward: named at once, rank 0's wait named with its library
        wait_for([tmp_path / "ready0", tmp_path / "ready1"], agent, log)
        time.sleep(1.0)  # rank 0 into its backward
        results = tmp_path / "results"
        started = time.monotonic()
        keeps = {k: v for k, v in os.environ.items() if k != "DDPDOCTOR_NO_SAVE"}  # the suite keeps nothing
        res = subprocess.run([*base, "--results-dir", str(results)], capture_output=True, text=True, timeout=180,
                             env=dict(keeps, COLUMNS="200"))
        took = time.monotonic() - started
        assert res.returncode == 1, res.stdout + res.stderr
        kept = list(results.glob("*/attach.json"))
        assert len(kept) == 1, list(results.rglob("*"))  # the result is kept, as README says
        doc = json.loads(kept[0].read_text())
        diag = doc["diagnosis"]
        assert diag["category"] == "missing_rank" and diag["named"] == [1], diag
        assert diag["culprits"][0]["function"] == "own_compute" and diag["culprits"][0]["where"].startswith(str(JOB))
        assert "DDP's gradient all_reduce inside loss.backward()" in diag["summary"]
        rank0 = doc["ranks"][0]
        assert rank0["wait"]["library"] == "DDP" and rank0["wait"]["certain"] and rank0["native"], rank0
        assert rank0["where"].startswith(str(JOB)) and rank0["cpu"] is not None and rank0["moved"] is False
        assert doc["watched_s"] < 10 and took < 60, (doc["watched_s"], took)  # a clear hang: no watch
        assert "rank(s) 1 never entered DDP's gradient all_reduce" in res.stdout and "DDP: all_reduce" in res.stdout
        lines = res.stderr.splitlines()  # not a terminal: the sampling as plain lines
        assert any("reading 2 rank(s) with py-spy: round 4/4" in x for x in lines), res.stderr
        assert all(x.startswith(("[ddpdoctor attach] ", "Wrote ", "wrote ")) for x in lines if x.strip()), lines
        assert agent.poll() is None  # attach only reads: the job still runs
    finally:
        kill_family(agent)


LIBRARY_JOBS = Path(__file__).with_name("library_jobs")  # the forensics suite's jobs (faults.py: rank 1 hangs)


def attach_at_fault(argv: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict, float]:
    """Start a library job as users start it; when its rank 1 hangs (STALL_FILE), attach once: within the
    job's 20-second process-group timeout, which ends the hang."""
    stall, log = tmp_path / "stall", tmp_path / "job.log"
    job = subprocess.Popen(argv, env=dict(os.environ, STALL_FILE=str(stall), FAULT_RANK="1", OMP_NUM_THREADS="1"),
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        wait_for([stall], job, log, timeout=240)
        time.sleep(1.0)  # the others into their wait
        started = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--pid", str(job.pid), "--json", "--no-save",
                              "--interval", "2", "--wait", "10"], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
        return res, json.loads(res.stdout or "{}"), took
    finally:
        kill_family(job)


@pytest.mark.timeout(300)
def test_a_pipeline_stage_stuck_in_its_forward_is_named(tmp_path):
    """torch.distributed.pipelining, 1F1B over 3 stages, stage 1 stuck in its own forward: its neighbours wait in
    the schedule's P2POp batch (_wait_batch_p2p), which no torch.distributed call of the user's shows. Before
    (issue 37): "the job progresses: no rank waits on another"."""
    res, doc, took = attach_at_fault([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
                                      "--master-port", str(free_port()), str(LIBRARY_JOBS / "pipelining_job.py"),
                                      "hang", "--schedule", "1f1b"], tmp_path)
    assert res.returncode == 1, res.stderr
    diag = doc["diagnosis"]
    assert diag["named"] == [1] and "faults.py:" in diag["culprits"][0]["where"], diag
    assert {r["wait"]["library"] for r in doc["ranks"] if r["rank"] != 1} == {"pipelining"}, doc["ranks"]
    assert took < 20


@pytest.mark.timeout(300)
def test_a_job_lightnings_own_launcher_started_is_found_and_its_hang_named(tmp_path):
    """`python lightning_job.py --devices 2`: Lightning's launcher is rank 0 itself (its variables set in-process)
    and started rank 1 with LOCAL_RANK but no RANK. Before (issue 37): no job found, exit 2."""
    res, doc, took = attach_at_fault([sys.executable, str(LIBRARY_JOBS / "lightning_job.py"), "hang", "--devices",
                                      "2"], tmp_path)
    assert res.returncode == 1, res.stderr
    assert (doc["job"]["launcher"], doc["job"]["world_size"], doc["job"]["ranks_here"]) == ("lightning", 2, [0, 1])
    diag = doc["diagnosis"]
    assert diag["named"] == [1] and "faults.py" in diag["culprits"][0]["where"], diag
    rank0 = doc["ranks"][0]
    assert rank0["wait"]["library"] == "DDP" and rank0["native"] and "Lightning" in rank0["wait"]["phrase"]
    assert took < 20
