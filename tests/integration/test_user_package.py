"""Issue 53 item 5: a job started as `-m mypkg.train` from an installed package (site-packages, as `pip install .`
of the user's project leaves it; the reference trainer's too): a hang in it is named at its line, not left without
a file:line because the frames are under site-packages."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.test_trainer import run_trainer

pytestmark = pytest.mark.slow

TRAIN = '''import datetime, os, time
import torch, torch.distributed as dist

def load_batch(rank):
    if rank == 1:
        if os.environ.get("HUNG_MARK"):  # test_one_outcome.py waits for it before it attaches
            open(os.environ["HUNG_MARK"], "w").close()
        time.sleep(3600)  # HANG: asleep in the package's own code
    return torch.ones(4)

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    rank = dist.get_rank()
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
        time.sleep(1.2)
    dist.all_reduce(load_batch(rank))

if __name__ == "__main__":
    main()
'''


def installed_package(tmp_path: Path) -> Path:
    """``mypkg`` (TRAIN as mypkg/train.py) in a venv's site-packages, as `pip install .` leaves a user's project."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "mypkg").mkdir(parents=True)
    (site / "mypkg" / "__init__.py").write_text("")
    (site / "mypkg" / "train.py").write_text(TRAIN)
    return site


@pytest.mark.timeout(240)
def test_a_hang_in_an_installed_package_is_named_at_its_line(tmp_path):
    site = installed_package(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OMP_NUM_THREADS": "1"}
    p, doc = run_trainer("--nproc-per-node", "2", "--hang-timeout", "6", "--", "-m", "mypkg.train",
                         run_dir=tmp_path / "run", timeout=200, env=env)
    assert p.returncode == 1 and doc and doc["culprit_ranks"] == [1], p.stderr[-3000:]
    line = 1 + TRAIN.splitlines().index("        time.sleep(3600)  # HANG: asleep in the package's own code")
    assert doc["root_cause"]["location"] == f"{site}/mypkg/train.py:{line}", doc["root_cause"]
    outcome = doc["outcome"]  # the one Outcome (judge/outcome.py): the same rank and place
    assert (outcome["state"], outcome["entry"]) == ("hang", "run-trainer"), outcome
    assert [(c["rank"], c["where"], c["function"]) for c in outcome["culprits"]] == [
        (1, f"{site}/mypkg/train.py:{line}", "load_batch")], outcome["culprits"]
    assert doc["hang"]["outcome"]["culprits"][0]["where"] == outcome["culprits"][0]["where"]  # the live report's
