"""run-trainer with a full --run-dir (issue 25, item 5): the result and its post-mortem are shown first, then one
line names the path and the free space; the job's exit code (1: it failed) stands, never 2 or 4 (issue 33);
no temp file left behind."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.conftest import leftovers


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_trainer_on_a_full_run_dir(tmp_path, tiny_fs):
    script = tmp_path / "job.py"
    script.write_text("import sys\nprint(sys.argv, flush=True)\nraise ValueError('boom')\n")
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir",
                        str(tiny_fs / "run"), "--", str(script), "--x", "1"], capture_output=True, text=True,
                       timeout=200, start_new_session=True, env={**os.environ, "COLUMNS": "400"})
    assert p.returncode == 1, (p.returncode, p.stderr[-3000:])  # was 2: a full disk changed the verdict's code
    assert "run-trainer: FAIL" in p.stdout  # the result and its post-mortem came first
    assert "no readable record" in p.stdout and "free space where --run-dir points" in p.stdout, p.stdout
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "No space left" in errors[0] and "free in" in errors[0], p.stderr[-2000:]
    assert "run.json" in errors[0] and str(tiny_fs) in errors[0]
    assert "internal error" not in p.stderr
    assert leftovers(tiny_fs) == []
    assert not [q for q in tiny_fs.rglob("*") if ".tmp" in q.name]
