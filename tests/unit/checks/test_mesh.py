"""Unit tests of checks/mesh.py."""
from __future__ import annotations

from ddpdoctor_checks.mesh import PORTS_NOTE, MeshCheck

from ddpdoctor.api import Level
from ddpdoctor.cluster.endpoint import FIXES


def fails(results):
    return [r for r in results if r.level is Level.FAIL]


def probe(peer, ok=True, cls=None, rtt=0.3):
    return {"peer": peer, "addr": f"{peer}:4000", "ok": ok, "error_class": cls, "rtt_ms": rtt if ok else None,
            "message": None}


def test_mesh_names_the_directed_pair_and_its_class():
    facts = {"a": {"probes": [probe("b"), probe("c", False, "timed out")], "peers_total": 2},
             "b": {"probes": [probe("a"), probe("c", False, "refused")], "peers_total": 2},
             "c": {"probes": [probe("a"), probe("b", rtt=120.0)], "peers_total": 2}}
    res = MeshCheck().compare(facts, MeshCheck().with_defaults({"warn_rtt_ms": 50.0}))
    f = {(r.details["src"], r.details["dst"]): r for r in fails(res)}
    assert set(f) == {("a", "c"), ("b", "c")}
    assert "timed out" in f[("a", "c")].summary and "refused" in f[("b", "c")].summary
    assert all("iptables" in r.fix for r in f.values()) and f[("a", "c")].fix != f[("b", "c")].fix
    (slow,) = [r for r in res if r.level is Level.WARN]
    assert slow.nodes == ["c", "b"] and slow.actual == 120.0


def levels(results, level):
    return [r for r in results if r.level is level]


def test_mesh_each_failure_class_gets_its_own_fix_and_the_ports_note():
    facts = {"a": {"probes": [probe("b", False, "unreachable"), probe("c", False, "refused")], "peers_total": 2},
             "b": {"probes": [probe("a", False, "timed out"), probe("c")], "peers_total": 2}}
    res = {(r.details["src"], r.details["dst"]): r for r in levels(MeshCheck().compare(facts, MeshCheck().with_defaults({})), Level.FAIL)}
    for pair, cls in {("a", "b"): "unreachable", ("a", "c"): "refused", ("b", "a"): "timed out"}.items():
        r = res[pair]
        assert r.summary.startswith(f"link {pair[0]} -> {pair[1]} {cls}") and r.actual == cls
        assert r.fix.startswith(FIXES[cls]) and PORTS_NOTE in r.fix and f"on {pair[1]}:" in r.fix
        assert r.nodes == list(pair)


def test_mesh_all_open_passes_with_the_max_rtt_and_single_node_skips():
    res = MeshCheck().compare({"a": {"probes": [probe("b", rtt=0.2), probe("c", rtt=0.9)], "peers_total": 2}}, MeshCheck().with_defaults({}))
    assert [r.level for r in res] == [Level.PASS] and res[0].actual == 0.9
    solo = MeshCheck().compare({"a": {"probes": [], "peers_total": 0}}, MeshCheck().with_defaults({}))
    assert [r.level for r in solo] == [Level.SKIP]


def test_mesh_fix_lists_the_accept_rule_for_every_peer_that_could_not_get_in():
    # c drops incoming TCP: the fix to paste on c names each source's address (it once said "<a address>")
    facts = {"a": {"probes": [probe("b"), probe("c", False, "timed out")], "peers_total": 2, "addr": "10.0.0.1"},
             "b": {"probes": [probe("a"), probe("c", False, "timed out")], "peers_total": 2, "addr": "10.0.0.2"},
             "c": {"probes": [probe("a"), probe("b")], "peers_total": 2, "addr": "10.0.0.3"}}
    res = fails(MeshCheck().compare(facts, MeshCheck().with_defaults({})))
    assert len(res) == 2 and {r.fix for r in res} == {res[0].fix}
    assert res[0].fix.endswith("on c: iptables -I INPUT -s 10.0.0.1 -p tcp -j ACCEPT; "
                               "iptables -I INPUT -s 10.0.0.2 -p tcp -j ACCEPT")
    old = {n: {k: v for k, v in f.items() if k != "addr"} for n, f in facts.items()}  # facts without the address
    assert "iptables -I INPUT -s <a address> -p tcp" in fails(MeshCheck().compare(old, MeshCheck().with_defaults({})))[0].fix


def test_mesh_fix_quotes_an_address_another_node_sent():
    facts = {"a": {"probes": [probe("c", False, "refused")], "peers_total": 1, "addr": "1.2.3.4; rm -rf ~"},
             "c": {"probes": [probe("a")], "peers_total": 1, "addr": "10.0.0.3"}}
    (r,) = fails(MeshCheck().compare(facts, MeshCheck().with_defaults({})))
    assert "iptables -I INPUT -s '1.2.3.4; rm -rf ~' -p tcp -j ACCEPT" in r.fix
