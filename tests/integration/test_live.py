"""While the job runs (real processes, CPU, gloo): a rank five times slower in its own code is named live, on
the terminal before the job ends, and the job passes; a healthy job names nobody."""
from __future__ import annotations

import pytest

from tests.integration.test_forensics import USER_DDP
from tests.integration.test_trainer import run_trainer

SLOW = '        x = next(loader) if MODE == "loader" else get_batch(rank, step)\n'
SLOWER = SLOW + ('        if MODE == "straggle" and rank == 1:\n'
                 '            time.sleep(4 * float(os.environ.get("STEP_S", "0.2")))  # 5x the others\' step\n')


@pytest.fixture
def script(tmp_path):
    assert SLOW in USER_DDP
    path = tmp_path / "user_ddp.py"
    path.write_text(USER_DDP.replace(SLOW, SLOWER))
    return path


def run(tmp_path, script, mode, steps):
    return run_trainer("--nproc-per-node", "2", "--", str(script), mode, run_dir=tmp_path / "run", timeout=200,
                       env={"STEPS": str(steps), "STEP_S": "0.1"})


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_straggler_is_named_while_the_job_runs_and_the_job_passes(tmp_path, script):
    p, doc = run(tmp_path, script, "straggle", 60)
    assert p.returncode == 0 and doc["verdict"] == "pass", p.stderr[-3000:]
    named = doc["stragglers"]
    assert [s["rank"] for s in named] == [1], named
    s = named[0]
    assert s["slower_x"] >= 2.5 and s["others_wait_s"] > 0.2 and s["own_s"] > s["others_own_s"], s
    assert s["attempt"] == 0, s  # the first workers are attempt 0
    lines = [ln for ln in p.stderr.splitlines() if "straggler: rank 1" in ln]
    assert len(lines) == 1 and "slower" in lines[0] and "its own code" in lines[0], p.stderr[-3000:]
    # live: named while the job still had well over ten of its ~0.5 s steps to go, not in the summary afterwards
    assert s["named_after_s"] is not None and s["named_after_s"] < doc["wall_s"] - 5, (s, doc["wall_s"])
    print(f"named after {s['named_after_s']} s of a {doc['wall_s']} s run: {lines[0]}")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_healthy_job_names_no_straggler(tmp_path, script):
    p, doc = run(tmp_path, script, "healthy", 60)
    assert p.returncode == 0 and doc["verdict"] == "pass", p.stderr[-3000:]
    assert doc["stragglers"] == [] and "straggler" not in p.stderr, p.stderr[-3000:]
