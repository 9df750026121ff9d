"""Secrets a failing script prints never leave the node (issue 25, item 3): not in run.json, the terminal
output or the HTML report; an exception message holding a key is redacted too."""
from __future__ import annotations

import sys
import textwrap

import pytest

from tests.integration.test_trainer import run_bounded

SECRETS = ("hunter2", "sk-proj-4f9a8b7c6d5e4f3a2b1cXyZ0", "abc123tok", "sk-live-4f9a8b7c6d5e4f3a2b1c")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_script_that_prints_its_argv_and_fails_leaks_no_secret(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent('''\
        import sys
        print(sys.argv, flush=True)
        print(" ".join(sys.argv), file=sys.stderr, flush=True)
        raise RuntimeError("auth failed with sk-live-4f9a8b7c6d5e4f3a2b1c for " + " ".join(sys.argv[1:]))
    '''))
    report = tmp_path / "report.html"
    run_dir = tmp_path / "run"
    p = run_bounded([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir", str(run_dir),
                     "--report", str(report), "--", str(script), "--password", "hunter2",
                     "sk-proj-4f9a8b7c6d5e4f3a2b1cXyZ0", "https://x/?token=abc123tok"], 200)
    assert p.returncode == 1, p.stderr[-3000:]
    run_json = next(run_dir.glob("*/run.json")).read_text()
    html = report.read_text()
    assert "RuntimeError" in run_json and "auth failed" in run_json  # the evidence is there, redacted
    for where, text in (("run.json", run_json), ("stdout", p.stdout), ("stderr", p.stderr), ("html", html)):
        for secret in SECRETS:
            assert secret not in text, (where, secret)
    assert "&lt;redacted&gt;" in html and "<redacted>" in run_json
