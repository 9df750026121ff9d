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


def _keyed_master(token=None, allow=False) -> Master:
    m = Master.__new__(Master)
    m.rejected = {}
    m.mb = SimpleNamespace(sealed=True)
    m.cfg = SimpleNamespace(token=token, allow_unauthenticated=allow)
    return m


def test_a_keyed_run_takes_no_unsigned_identity_unless_told():
    """Issue 33: an unsigned identity (anyone who reaches the port can write one) holds no rank in a run with
    the key file: the rank stays missing (the master waits on for a node with the key) and the claim is named;
    --allow-unauthenticated takes it as before."""
    impostor = {"rank": 1, "claim": 1, "host": "impostor", "addr": "127.0.0.9", "_keyed": False}
    valid = {0: [{"rank": 0, "claim": 0, "_keyed": True}], 1: [dict(impostor)]}
    m = _keyed_master()
    assert m.keyed_only() and m._refused_ranks(valid) == {1}
    assert len(m._refuse_keyless(valid)) == 1 and sorted(valid) == [0]
    assert "without the run's key by impostor" in m.rejected["ident/1/1"]
    told = _keyed_master(allow=True)
    kept = {0: [{"rank": 0, "claim": 0, "_keyed": True}], 1: [dict(impostor)]}
    assert not told.keyed_only() and told._refused_ranks(kept) == set() and told._refuse_keyless(kept) == []
    assert sorted(kept) == [0, 1]
    assert not _keyed_master(token="s3cret").keyed_only()  # with --token an unsigned identity never verifies
