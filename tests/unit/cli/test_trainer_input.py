"""run-trainer's bad input: one line and exit 2 before anything starts (in-process; moved from the integration
tests, where each case cost an interpreter's start-up)."""
from __future__ import annotations

import pytest

from tests.unit.helpers import run_cli


@pytest.mark.parametrize("args,needle", [
    (["--", "does_not_exist.py"], "no such file"),
    (["--nnodes", "2"], "--master"),
    (["--master", "nohostport"], "HOST:PORT"),
    (["--nproc-per-node", "0"], "nproc-per-node"),
    (["--", "notascript"], "expected a Python script"),
    (["--", "-m"], "module name after it"),
    (["--", "-m", "a/b.py"], "module name"),
    (["--hang-timeout", "-1"], "positive"),
    (["--hang-timeout", "inf"], "finite"),
    (["--hang-timeout", "nan"], "finite"),
    (["--rdzv-id", "a/../b c"], "--rdzv-id"),
    (["--preflight-args", "--bogus"], "--preflight-args: No such option '--bogus'"),
    (["--preflight-args", "--nnodes 2"], "run-trainer's own flags"),
    (["--nproc-per-node", "100000"], "nproc-per-node"),
    (["--max-restarts", "100000"], "max-restarts"),
    (["--steps", "10000000000"], "steps"),
    (["--resume", "nope"], "no snapshot"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    p = run_cli("run-trainer", "--no-preflight", "--run-dir", tmp_path, *args)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr
