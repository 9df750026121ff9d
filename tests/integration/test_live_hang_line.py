"""The live hang line (issue 32 item 2): when the watchdog takes its evidence before the user's own process-group
timeout (20 s), one line names the culprit at once, ahead of the ranks' timeout tracebacks; the panel follows.
3 real ranks (CPU, gloo) of tests/integration/fr_job.py, rank 1 sleeping in its data loading."""
from __future__ import annotations

import pytest

from tests.integration.fr_job import JOB, LINE
from tests.integration.test_trainer import run_trainer

pytestmark = pytest.mark.slow


@pytest.mark.timeout(150)
def test_the_culprit_is_named_before_the_ranks_timeout_tracebacks(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {"CULPRITS": "1", "PG_TIMEOUT": "20", "STALL_FILE": str(tmp_path / "stall"), "OMP_NUM_THREADS": "1"}
    p, doc = run_trainer("--nproc-per-node", "3", "--", str(job), "sleep", run_dir=tmp_path / "run", timeout=140,
                         env=env)
    assert doc is not None, p.stderr[-3000:]
    lines = p.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("ddpdoctor: hang:")]
    assert len(said) == 1, p.stderr[-3000:]
    line = lines[said[0]]
    assert "rank 1" in line and f"{job}:{LINE['sleep']}" in line and "wait in" in line, line
    assert "rank 0" not in line.split(" for ", 1)[1] and "rank 2" not in line.split(" for ", 1)[1], line
    # every line a rank printed about its timeout comes after the live line
    timeouts = [i for i, line in enumerate(lines) if "Timed out" in line or "Traceback" in line]
    assert all(i > said[0] for i in timeouts), "\n".join(lines[:said[0] + 1])[-3000:]
    assert doc["hang"]["verdict"]["culprits"][0]["rank"] == 1 and doc["culprit_ranks"] == [1]
