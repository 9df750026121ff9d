"""Small helpers the unit tests share: running the CLI, asserting the one-line usage error, reading results."""
from __future__ import annotations

import subprocess
import sys

from ddpdoctor.api import NodeContext


def run_cli(*args, timeout=90):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True, timeout=timeout)


def assert_usage_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
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
