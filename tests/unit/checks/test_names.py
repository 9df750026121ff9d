"""Unit tests of checks/names.py."""
from __future__ import annotations

from ddpdoctor_checks.names import NamesCheck

from ddpdoctor.api import Level


def names_facts(**kw):
    base = {"hostname": "n1", "route_to_master": {"iface": "eth0", "mtu": 1500}, "routes_to_peers": {"eth0": 2},
            "ifname_env": {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None},
            "hostname_lookup": {"answer": ["10.0.0.1"], "error": None}, "advertised": "10.0.0.1",
            "unique_hostnames": True, "lookups": [], "peer_addrs": {}}
    base.update(kw)
    return base


def test_names_ifname_mtu_loopback_and_slow_lookup():
    facts = {
        "n1": names_facts(),
        "n2": names_facts(hostname="n2", advertised="10.0.0.2", hostname_lookup={"answer": ["10.0.0.2"]},
                          ifname_env={"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": None}),
        "n3": names_facts(hostname="n3", advertised="10.0.0.3", route_to_master={"iface": "eth0", "mtu": 9000},
                          hostname_lookup={"answer": ["127.0.1.1"]}),
        "n4": names_facts(hostname="n4", advertised="10.0.0.4", hostname_lookup={"answer": ["10.0.0.4"]},
                          lookups=[{"kind": "reverse", "query": "10.0.0.9", "answer": None, "seconds": 4.5}]),
    }
    res = NamesCheck().compare(facts, NamesCheck().with_defaults({"slow_lookup_s": 1.0}))
    by_node = {}
    for r in res:
        if r.level in (Level.FAIL, Level.WARN):
            by_node.setdefault(r.nodes[0], []).append(r)
    assert "NCCL_SOCKET_IFNAME=ib" in by_node["n2"][0].summary and "=eth0" in by_node["n2"][0].fix
    n3 = " | ".join(r.summary for r in by_node["n3"])
    assert "MTU 9000" in n3 and "loopback 127.0.1.1" in n3
    assert any("map n3 to 10.0.0.3" in r.fix for r in by_node["n3"])
    assert by_node["n4"][0].level is Level.WARN and "4.50 s" in by_node["n4"][0].summary
    assert "n1" not in by_node


def levels(results, level):
    return [r for r in results if r.level is level]


def test_names_ifname_syntax_rules():
    facts = {
        "ok": names_facts(ifname_env={"NCCL_SOCKET_IFNAME": "^docker,lo", "GLOO_SOCKET_IFNAME": "eth0"}),
        "excl": names_facts(ifname_env={"NCCL_SOCKET_IFNAME": "^eth", "GLOO_SOCKET_IFNAME": None}),
        "gloo": names_facts(ifname_env={"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": "=eth0"}),
    }
    res = NamesCheck().compare(facts, NamesCheck().with_defaults({}))
    fails = {r.nodes[0]: r for r in levels(res, Level.FAIL)}
    assert set(fails) == {"excl", "gloo"}
    assert fails["excl"].fix == "export NCCL_SOCKET_IFNAME==eth0  # on excl"
    assert fails["gloo"].fix == "export GLOO_SOCKET_IFNAME=eth0  # on gloo"
    assert fails["gloo"].actual == "=eth0" and fails["gloo"].expected == "eth0"


def test_names_unresolvable_hostname_pinned_loopback_and_split_routes():
    facts = {
        "nores": names_facts(hostname="nores", hostname_lookup={"answer": None, "error": "gaierror: no name"}),
        "pinned": names_facts(hostname="pinned", hostname_lookup={"answer": ["127.0.1.1"]},
                              ifname_env={"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": "eth0"}),
        "split": names_facts(routes_to_peers={"eth0": 1, "ib0": 2}),
        "elsewhere": names_facts(hostname="elsewhere", hostname_lookup={"answer": ["192.168.9.9"]}),
    }
    res = NamesCheck().compare(facts, NamesCheck().with_defaults({}))
    fails = {r.nodes[0]: r for r in levels(res, Level.FAIL)}
    warns = {r.nodes[0]: r for r in levels(res, Level.WARN)}
    assert set(fails) == {"nores"} and "'10.0.0.1 nores' to /etc/hosts" in fails["nores"].fix
    assert "resolves to loopback" in warns["pinned"].summary  # GLOO pinned: a warning, not a fail
    assert "ib0" in warns["split"].summary and "NCCL_SOCKET_IFNAME" in warns["split"].fix
    assert "peers reach it at 10.0.0.1" in warns["elsewhere"].summary


def test_names_mtu_fix_names_the_interface():
    facts = {n: names_facts() for n in ("a", "b")}
    facts["c"] = names_facts(route_to_master={"iface": "ib0", "mtu": 2044})
    (mtu,) = [r for r in levels(NamesCheck().compare(facts, NamesCheck().with_defaults({})), Level.FAIL)]
    assert mtu.nodes == ["c"] and mtu.fix.endswith("ip link set dev ib0 mtu 1500")


def test_names_no_split_route_warning_without_the_masters_interface():
    # an address no interface held (once: the master on --local-addr 127.0.0.2) read "the master through None"
    facts = {"m": names_facts(route_to_master={"iface": None, "addr": "127.0.0.2", "mtu": None},
                              routes_to_peers={"lo": 1})}
    res = NamesCheck().compare(facts, NamesCheck().with_defaults({}))
    assert not any("None" in r.summary for r in res), [r.summary for r in res]


def test_slow_lookups_of_every_pair_are_one_finding_with_the_pairs_it_covers():
    """Issue 55 U6: a loaded 32-node run kept 883 results "reverse lookup ... took 6.00 s", one per pair."""
    names = [f"n{i:02d}" for i in range(32)]
    facts = {n: names_facts(hostname=n, advertised=f"10.0.0.{i}", hostname_lookup={"answer": [f"10.0.0.{i}"]},
                            lookups=[{"kind": "reverse", "query": f"10.0.0.{j}", "answer": p, "seconds": 6.0,
                                      "node": p} for j, p in enumerate(names) if p != n])
             for i, n in enumerate(names)}
    res = NamesCheck().compare(facts, NamesCheck().with_defaults({"slow_lookup_s": 1.0}))
    (slow,) = levels(res, Level.WARN)
    assert slow.summary == "992 of 992 reverse lookups from 32 nodes took over 1 s (up to 6.00 s)"
    assert slow.nodes == names and len(slow.details["pairs"]) == 992
    assert slow.details["pairs"][0] == ["n00", "10.0.0.1", 6.0]


def test_a_forward_answer_is_held_against_the_peers_own_address():
    """The facts no longer copy every peer's address into each node's: the peer's own "advertised" is used."""
    facts = {"n1": names_facts(lookups=[{"kind": "forward", "query": "n2", "answer": ["10.9.9.9"], "seconds": 0.01,
                                         "node": "n2"}]),
             "n2": names_facts(hostname="n2", advertised="10.0.0.2", hostname_lookup={"answer": ["10.0.0.2"]})}
    del facts["n1"]["peer_addrs"], facts["n2"]["peer_addrs"]
    (wrong,) = levels(NamesCheck().compare(facts, NamesCheck().with_defaults({})), Level.WARN)
    assert "n1 resolves n2 to 10.9.9.9, but that node is at 10.0.0.2" == wrong.summary
