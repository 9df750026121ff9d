"""Issue 45 item 4: an exception on rank 1 inside torch.distributed.checkpoint's dcp.save was reported as rank 0's
("rank 0 ... RuntimeError: corrupt batch at step 6 on rank 1"): DCP re-raises `CheckpointException
ranks:dict_keys([1])` on every rank and rank 0 exits first. The rank the library names is the culprit, under
run-trainer and in postmortem of plain torchrun's log dir."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_trainer import run_trainer

pytestmark = pytest.mark.slow
JOB = Path(__file__).parent / "library_jobs" / "dcp_save_fails.py"


def _assert_rank_1(doc: dict) -> None:
    rc = doc["root_cause"]
    assert doc["verdict"] == "fail" and rc["rank"] == 1 and doc["culprit_ranks"] == [1], rc
    assert rc["location"] == f"{JOB}:12" and "corrupt batch" in rc["message"], rc
    (c,) = [c for c in doc["consequences"] if c["rank"] == 0]
    assert "re-raised rank 1" in c["reason"], c


@pytest.mark.timeout(240)
def test_run_trainer_names_the_rank_dcp_names(tmp_path):
    p, doc = run_trainer("--nproc-per-node", "2", "--", str(JOB), str(tmp_path / "ckpt"), run_dir=tmp_path / "run",
                         timeout=200)
    assert p.returncode == 1 and doc, p.stderr[-3000:]
    _assert_rank_1(doc)


@pytest.mark.timeout(240)
def test_postmortem_names_the_rank_dcp_names(tmp_path):
    logs = tmp_path / "logs"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--redirects", "3",
                          "--log-dir", str(logs), str(JOB), str(tmp_path / "ckpt")], capture_output=True, text=True,
                         timeout=200)
    assert run.returncode != 0, run.stderr[-2000:]
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "postmortem", str(logs), "--json", "--no-save"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    _assert_rank_1(json.loads(p.stdout))
