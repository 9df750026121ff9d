"""`ddpdoctor attach` on jobs built on torch's libraries, where the ranks wait inside the library rather than in a
torch.distributed call of their own (issue 37). One DDP job under plain torchrun (2 gloo ranks, a 30-minute
process-group timeout; tests/integration/attach_job.py, shape `ddp`) serves every assertion, in its order:

1. rank 1 takes a long step (10 s of CPU in its own code) while rank 0 waits in DDP's Reducer: attach sees
   nothing move but rank 1 computing, watches, and says the job progresses when rank 0 moves (never a hang);
2. rank 1 hangs before its backward (asleep in its own code): attach names it at once, with rank 0's wait named
   as DDP's gradient all_reduce from its native frames, shows its sampling on stderr and keeps attach.json.

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
