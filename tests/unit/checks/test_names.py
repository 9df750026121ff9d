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
