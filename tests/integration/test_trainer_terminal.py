"""What run-trainer leaves on the terminal: after a hang verdict the panel is the last word (torchrun's and the
ranks' reaction to being stopped goes to the run's logs, which the panel names), and the panel and the PASS
summary name run.json and the logs by full path."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_forensics import USER_DDP

pytestmark = pytest.mark.slow


@pytest.mark.timeout(200)
def test_after_a_hang_verdict_the_panel_is_the_last_word(tmp_path):
    script = tmp_path / "user_ddp.py"
    script.write_text(USER_DDP)
    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir", str(run_dir),
                        "--nproc-per-node", "2", "--hang-timeout", "5", "--", str(script), "sleep"],
                       capture_output=True, text=True, timeout=180, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 1, p.stderr[-3000:]
    assert "run-trainer: FAIL — root cause" in p.stdout and "hang" in p.stdout
    terminal = p.stdout + p.stderr
    for noise in ("Traceback", "SignalException", "got signal"):
        assert noise not in terminal, terminal[-3000:]
    # The panel ends with where the records are: run.json and this node's logs.
    (run_json,) = run_dir.glob("*/run.json")
    logs = next(run_dir.glob("*/logs/*"))
    # (issue 32: below the panel, one a line, relative to the working directory when under it: never broken)
    named = dict(line.split(": ", 1) for line in p.stdout.splitlines()[-2:])
    assert (tmp_path / named["run.json"]).resolve() == run_json.resolve(), p.stdout
    assert (tmp_path / named["logs"]).resolve() == logs.resolve(), p.stdout
    # Nothing is lost: torchrun's own output, stopping included, is in its log beside the ranks' logs.
    agent = (logs / "agent.stderr.log").read_text()
    assert "SignalException" in agent or "got signal" in agent or "Received" in agent, agent[-2000:]
