"""Unit tests of ddpdoctor/cluster/view.py."""
from __future__ import annotations

from ddpdoctor.cluster.view import FULL_MESH_MAX, ClusterView


def nodes(n):
    return [{"name": f"n{i}", "rank": i, "addr": f"10.0.0.{i}", "probe_port": 1} for i in range(n)]


def test_full_mesh_up_to_64_nodes():
    ns = nodes(FULL_MESH_MAX)
    view = ClusterView(me=ns[3], nodes=ns, master=ns[0], endpoint="x:1")
    assert len(view.peers_to_probe()) == FULL_MESH_MAX - 1


def test_ring_plus_random_beyond_64_covers_every_node_deterministically():
    ns = nodes(300)
    probed_by: dict[str, int] = {}
    for me in ns:
        view = ClusterView(me=me, nodes=ns, master=ns[0], endpoint="x:1")
        peers = view.peers_to_probe()
        assert peers == view.peers_to_probe()  # deterministic: the same on every call
        assert 2 <= len(peers) <= 10 and me not in peers
        for p in peers:
            probed_by[p["name"]] = probed_by.get(p["name"], 0) + 1
    assert set(probed_by) == {n["name"] for n in ns}  # everyone is probed by someone (its ring neighbours)
