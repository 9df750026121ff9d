"""A node whose torch does not import (a stub `torch` package on PYTHONPATH that raises, as a missing shared
library does) ends at once with one line naming torch's error and the fix, exit 3: a fresh interpreter is the
point (this one has the real torch loaded). With a master: tests/integration/test_broken_torch.py."""
from __future__ import annotations

import time

from tests.unit.helpers import run_process


def test_the_worker_ends_without_waiting_for_the_master(broken_torch):
    """No master at all: the broken node does not wait out --timeout for one; torch is the first thing it needs."""
    start = time.monotonic()
    p = run_process("preflight", "--master", "127.0.0.1:9", "--nnodes", "2", "--node-rank", "1", "--local-addr",
                    "127.0.0.2", "--timeout", "60", env={"PYTHONPATH": broken_torch}, timeout=60)
    assert p.returncode == 3 and "torch does not import here" in p.stderr, p.stderr
    assert time.monotonic() - start < 0 + 45  # no wait for the master (--timeout is 60); 30 s: start-up, loaded


def test_a_master_with_a_broken_torch_says_the_others_cannot_meet(broken_torch):
    p = run_process("preflight", "--master", "127.0.0.1:9", "--nnodes", "2", "--node-rank", "0", "--local-addr",
                    "127.0.0.1", "--timeout", "60", env={"PYTHONPATH": broken_torch}, timeout=60)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 3 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "torch does not import here" in lines[0] and "the other nodes report the master unreachable" in lines[0]
