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
    # issue 25 item 5: a host the resolver refuses launched torchrun, which waited silently for its rendezvous
    (["--nnodes", "2", "--master", "h" * 300 + ":29500"], "neither an IP address nor a host name"),
    (["--nnodes", "2", "--master", "a." + "b" * 100 + ":29500"], "neither an IP address nor a host name"),
    (["--nnodes", "2", "--master", "evil;rm -rf x:29500"], "neither an IP address nor a host name"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    p = run_cli("run-trainer", "--no-preflight", "--run-dir", tmp_path, *args)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_an_unwritable_output_after_the_run_is_exit_2_not_4(tmp_path, monkeypatch):
    """The result could not be saved where --output/--report point (a full disk): one line, exit 2. The
    command used a name that does not exist (documents.EXIT_USAGE) on this path, which made it an exit 4."""
    from ddpdoctor.cli import common
    from ddpdoctor.errors import UsageError
    from ddpdoctor.launch import run

    monkeypatch.setattr(run, "launch", lambda cfg, **kw: {"kind": "run-trainer", "verdict": "pass"})

    def full(doc, **kw):
        raise UsageError(f"{tmp_path}/out/run.json: cannot write (No space left on device)")

    monkeypatch.setattr(common, "emit", full)
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    p = run_cli("run-trainer", "--no-preflight", "--run-dir", tmp_path / "run", "--", script)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "No space left on device" in p.stderr and "internal error" not in p.stderr.lower()
