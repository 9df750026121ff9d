"""Issue 53: the same hung job gets one `outcome` from attach (while it hangs), run-trainer (its watchdog stops it)
and postmortem (of the logs run-trainer kept): the same category, the same culprit, and where it stands wherever
live stacks were read. The job is a user's package in site-packages (as `pip install .` leaves it), rank 1 asleep in
its own data loading while rank 0 waits in an all_reduce (test_user_package.py's job).
One job serves the three collectors. Cost: about 35 s and 20 CPU-s (two ranks, attach's py-spy samples, a postmortem)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_trainer import records
from tests.integration.test_user_package import TRAIN, installed_package  # the same job

pytestmark = pytest.mark.slow

HANG_TIMEOUT = 25  # long enough for attach to read the hung job before the watchdog stops it


def cli(*args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def same(outcome: dict) -> tuple:
    """What the three must agree on: the category and each culprit's rank (and where, when a stack said)."""
    return outcome["category"], [c["rank"] for c in outcome["culprits"]]


@pytest.mark.timeout(300)
def test_one_hung_job_is_one_outcome_from_attach_run_trainer_and_postmortem(tmp_path):
    site = installed_package(tmp_path)
    line = 1 + TRAIN.splitlines().index("        time.sleep(3600)  # HANG: asleep in the package's own code")
    where = f"{site}/mypkg/train.py:{line}"
    mark = tmp_path / "hung"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1", HUNG_MARK=str(mark), DDPDOCTOR_NO_SAVE="1")
    run_dir = tmp_path / "run"
    trainer = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir",
                                str(run_dir), "--json", "--nproc-per-node", "2", "--hang-timeout", str(HANG_TIMEOUT),
                                "--", "-m", "mypkg.train"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while not mark.exists() and trainer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert mark.exists(), "rank 1 never reached its hang"
        time.sleep(2)  # rank 0 into its all_reduce
        attached = cli("attach", "--pid", str(trainer.pid), "--json", "--interval", "2", "--wait", "10",
                       env=env, timeout=90)
        out, err = trainer.communicate(timeout=200)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, 9)
            trainer.wait(10)
    attach = json.loads(attached.stdout)
    assert attached.returncode == 1, (attached.stdout[-2000:], attached.stderr[-2000:])
    doc = json.loads(out)
    assert trainer.returncode == 1, err[-3000:]
    logs = Path(doc["logs"])
    post = cli("postmortem", str(logs), "--json", env=env, timeout=90)
    postmortem = json.loads(post.stdout)
    assert post.returncode == 1, post.stdout[-2000:]

    outcomes = {"attach": attach["outcome"], "run-trainer": doc["outcome"], "postmortem": postmortem["outcome"]}
    assert {name: o["entry"] for name, o in outcomes.items()} == {n: n for n in outcomes}
    assert {name: same(o) for name, o in outcomes.items()} == {n: same(outcomes["run-trainer"]) for n in outcomes}
    assert same(outcomes["run-trainer"])[1] == [1], outcomes
    # where rank 1 stands: attach and the watchdog read live stacks; postmortem reads the stack the watchdog kept
    for name in ("attach", "run-trainer"):
        assert [(c["where"], c["function"]) for c in outcomes[name]["culprits"]] == [(where, "load_batch")], \
            (name, outcomes[name])
    assert postmortem["culprit_ranks"] == doc["culprit_ranks"] == [1], (postmortem["root_cause"], doc["root_cause"])
    assert (records(run_dir, doc) / "run.json").is_file()
