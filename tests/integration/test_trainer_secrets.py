"""Secrets a failing script prints never leave the node (issue 25, item 3): not in run.json, the terminal
output or the HTML report; an exception message holding a key is redacted too. Issue 33: nor the values of
the job's environment (an error quoting $AWS_SECRET_ACCESS_KEY, $WANDB_API_KEY, $DB_PASSWORD) and of its
token arguments (-k KEY, --notify= webhook URLs), in run.json, --json, --output, the terminal,
agent.stderr.log, the rank's error.json and the copy torchrun makes of it, or the report."""
from __future__ import annotations

import json
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


JOB_ENV = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
           "WANDB_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c", "DB_PASSWORD": "Tr0ub4dor-3x"}
JOB_ARGS = ["-k", "Zq8vT3xLp0Wm7Yr2", "--notify=https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/abcdefghijklmnopqrstuvwx"]
JOB_SECRETS = (*JOB_ENV.values(), "Zq8vT3xLp0Wm7Yr2", "T01ABCDEF/B02GHIJKL", "abcdefghijklmnopqrstuvwx",
               "hf_abcdefghijklmnopqrstuvwxyz0123")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("as_json", [True, False])
def test_an_error_quoting_the_jobs_environment_and_token_arguments_leaks_nothing(tmp_path, as_json):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent('''\
        import os, sys
        print("db login with", os.environ["DB_PASSWORD"], file=sys.stderr, flush=True)
        raise RuntimeError("upload failed: aws " + os.environ["AWS_SECRET_ACCESS_KEY"] + " wandb "
                           + os.environ["WANDB_API_KEY"] + " db " + os.environ["DB_PASSWORD"]
                           + " hub hf_abcdefghijklmnopqrstuvwxyz0123 args " + repr(sys.argv[1:]))
    '''))
    run_dir, out_dir, report = tmp_path / "run", tmp_path / "out", tmp_path / "report.html"
    parent_error = tmp_path / "parent_error.json"  # torchrun copies the failed rank's error.json here
    argv = [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir", str(run_dir),
            "--output", str(out_dir), "--report", str(report), *(["--json"] if as_json else []),
            "--", str(script), *JOB_ARGS]
    p = run_bounded(argv, 260, env={**JOB_ENV, "TORCHELASTIC_ERROR_FILE": str(parent_error)})
    assert p.returncode == 1, p.stderr[-3000:]
    run_json = next(run_dir.glob("*/run.json")).read_text()
    assert "upload failed" in run_json and "<redacted>" in run_json  # the evidence is there, redacted
    if as_json:
        assert "upload failed" in json.loads(p.stdout)["root_cause"]["message"]
    texts = {"run.json": run_json, "stdout": p.stdout, "stderr": p.stderr, "html": report.read_text()}
    texts.update({str(f.relative_to(tmp_path)): f.read_text() for f in out_dir.rglob("*") if f.is_file()})
    agent_logs = list(run_dir.glob("*/logs/*/agent.stderr.log"))
    error_files = list(run_dir.glob("*/logs/**/error.json"))
    assert agent_logs and error_files and parent_error.is_file()
    texts.update({str(f.relative_to(tmp_path)): f.read_text() for f in [*agent_logs, *error_files, parent_error]})
    assert "upload failed" in texts[str(parent_error.relative_to(tmp_path))]
    for where, text in texts.items():
        for secret in JOB_SECRETS:
            assert secret not in text, (where, secret)
