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


def test_a_node_whose_torch_has_a_truncated_library_says_so_instead_of_dying(truncated_torch):
    """Loading a truncated library kills the process with SIGBUS (no line, no result: the prolog's meeting read a
    skipped meeting and the node passed); the library is read before the import and the node says which."""
    p = run_process("preflight", "--master", "127.0.0.1:9", "--nnodes", "2", "--node-rank", "1", "--local-addr",
                    "127.0.0.2", "--timeout", "60", env={"PYTHONPATH": truncated_torch}, timeout=60)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 3 and len(lines) == 1, (p.returncode, p.stderr)
    assert "torch does not import here (not imported: " in lines[0] and "libtruncated.so is truncated" in lines[0]
    assert "pip install --force-reinstall torch" in lines[0], lines[0]
