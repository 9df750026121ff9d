"""nccl-bench's bad input: one line and exit 2 before any rank starts (in-process; moved from the integration
tests, where each case cost an interpreter's start-up)."""
from __future__ import annotations

import pytest

from tests.unit.helpers import run_cli


@pytest.mark.parametrize("args,needle", [
    (["-b", "1M", "-e", "64K"], "above"),
    (["-b", "0"], "positive"),
    (["-e", "-5M"], "positive"),
    (["--op", "all_gatherz"], "unknown collective"),
    (["-d", "complex128"], "unknown"),
    (["--graph", "--backend", "gloo"], "CUDA graph"),
    (["--backend", "nccl"], "CUDA"),
    (["--nnodes", "2"], "--master"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    p = run_cli("nccl-bench", *args)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and needle in lines[0], p.stderr
