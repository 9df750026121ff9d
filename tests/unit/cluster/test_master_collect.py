"""The master's collecting loop (master.Master._collect) on a fake mailbox: what it says while it waits."""
from __future__ import annotations

import time
from types import SimpleNamespace

from ddpdoctor.cluster.master import Master
from ddpdoctor.cluster.progress import Progress


def test_no_waiting_line_without_a_name_when_the_last_node_is_found_dead(capsys):
    """The one node waited for is found dead by the liveness check: the master stops waiting at once and says
    nothing more (it printed "waiting for the check results of " with no name, then went on)."""
    m = Master.__new__(Master)
    m.silent = {}
    m.progress = Progress(False, "rank 0")
    m.mb = SimpleNamespace(read=lambda kind, slot: None)
    m._check_liveness = lambda view, only=None: m.silent.update({nm: "its probe listener is gone" for nm in only})
    view = SimpleNamespace(nodes=[{"name": "node1", "rank": 1, "claim": 1}])
    started = time.monotonic()
    assert m._collect("facts", view, until=started + 30) == {}
    assert time.monotonic() - started < 15 and m.silent == {"node1": "its probe listener is gone"}  # not the 30 s wait
    assert "waiting for" not in capsys.readouterr().err


def test_a_silent_node_that_joined_without_the_key_is_not_blamed_outright():
    """An outsider can claim a rank without the run's key under the real node's name and go quiet: the verdict
    says that the silent node was unauthenticated, so it may be an impostor, and how to close the door."""
    from ddpdoctor.cluster.master import unverified

    silent = {"node1": "stopped answering mid-preflight: no heartbeat for 8 s", "node2": "sent no facts"}
    others = [{"name": "node1"}, {"name": "node2"}]
    out = unverified(silent, ["node1"], others)
    assert out["node2"] == "sent no facts"
    assert out["node1"].startswith("stopped answering mid-preflight") and "may be an impostor" in out["node1"]
    assert "DDPDOCTOR_TOKEN" in out["node1"]
    assert unverified({}, ["node1"], others) == {}
    # no node but the master had the key (no shared home): every node joined that way, no impostor talk
    assert unverified(silent, ["node1", "node2"], others) == silent
