"""Small helpers the unit tests share: running the CLI (in this process, or as a real process where the
process is the point), asserting the one-line usage error, reading results."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from ddpdoctor.api import NodeContext


@dataclass
class CliResult:
    """What a `ddpdoctor` run left: the fields of subprocess.CompletedProcess that the tests read."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, env: dict | None = None, clear_env: bool = False, cwd=None, input: str | None = None,
            timeout: float | None = None) -> CliResult:
    """`ddpdoctor ARGS` in this process, through the same `ddpdoctor.cli.run` the console script calls (the one
    error policy included), with stdin/stdout/stderr and the environment swapped by click's CliRunner.isolation.

    ``env`` adds variables (None removes one); ``clear_env`` starts from an empty environment instead (what
    `subprocess.run(env=...)` does). ``timeout`` is accepted for the callers written against a subprocess; in
    this process pytest-timeout bounds a command that would hang. A few milliseconds instead of a fresh
    interpreter's second or more: use
    `run_process` only where the process itself is under test (its exit status, `python -m`, imports, signals).
    """
    from click.testing import CliRunner

    from ddpdoctor.cli import common, run

    changes: dict[str, str | None] = {k: None for k in os.environ} if clear_env else {}
    if clear_env:  # an emptied environment would save results in the checkout: nothing is kept unless asked
        changes["DDPDOCTOR_NO_SAVE"] = "1"
    changes.update(env or {})
    saved_env = dict(os.environ)  # what the command exports for its children (the run id) ends with it
    saved_state = (common.STATE.verbose, common.STATE.quiet)
    saved_cwd = os.getcwd()
    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1: stderr apart only when asked
    except TypeError:
        runner = CliRunner()  # click >= 8.2: always apart
    with runner.isolation(input=input, env=changes) as streams:
        out, err = streams[0], streams[1]
        try:
            if cwd is not None:
                os.chdir(cwd)
            try:
                code = run([str(a) for a in args])
            except SystemExit as exc:  # nothing under run() should exit, but a real process would survive it
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.chdir(saved_cwd)
            common.STATE.verbose, common.STATE.quiet = saved_state
        stdout, stderr = out.getvalue(), err.getvalue()
    os.environ.clear()
    os.environ.update(saved_env)
    return CliResult(int(code), stdout.decode(errors="replace"), stderr.decode(errors="replace"))


def run_process(*args, env: dict | None = None, timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    """`python -m ddpdoctor ARGS` as a real process (``env`` added to this one's, None removes a variable): for
    tests of the process itself, and for commands that start clusters of processes (kept out of pytest's)."""
    full = None
    if env is not None:
        full = {**os.environ, **env}
        full = {k: v for k, v in full.items() if v is not None}
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full, **kw)


def assert_usage_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def ctx(**run):
    return NodeContext(node="n1", run=run)


def levels(results):
    return [r.level for r in results]


def only(results, level):
    return [r for r in results if r.level is level]
