"""A node whose torch does not import (a stub `torch` package on its PYTHONPATH that raises, as a missing
shared library does): it cannot speak the protocol (the nodes meet on torch's TCPStore), so it ends at once
with one line naming torch's error and the fix (exit 3), and the master names it as the missing rank, with
the hint that such a node says why in its own output."""
from __future__ import annotations

import pytest

from tests.cluster_procs import assert_clean, budget_s, cluster  # noqa: F401 - fixture

TIMEOUT = 8


@pytest.mark.timeout(120)
def test_a_node_with_a_broken_torch_says_so_and_the_master_names_it(cluster, broken_torch):
    c = cluster(2)
    master = c.start_master(timeout=TIMEOUT)
    worker = c.start(1, timeout=TIMEOUT, env={"PYTHONPATH": broken_torch})
    assert worker.finish(30) == 3, c.report()
    lines = [ln for ln in worker.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in worker.stderr, worker.stderr
    assert "torch does not import here" in lines[0] and "libtorch_cpu.so" in lines[0], lines[0]
    assert "pip install torch" in lines[0] and "internal error" not in lines[0]
    assert master.finish(budget_s(TIMEOUT)) == 3, c.report()
    assert_clean(master)
    assert "missing rank(s) 1" in master.stderr and "says why in its own output" in master.stderr, master.stderr

