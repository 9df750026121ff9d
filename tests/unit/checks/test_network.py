"""Unit tests of checks/network.py."""
from __future__ import annotations

import json
import socket

from ddpdoctor_checks import (
    network,
)

from ddpdoctor.api import Level
from tests.unit.helpers import ctx, only


# ---------------------------------------------------------------- network
def net_facts(**kw):
    base = {"hostname": "node1", "fqdn": "node1.cluster",
            "resolves": {"node1": {"addrs": ["10.0.0.5"], "error": None}},
            "interfaces": [{"name": "lo", "ipv4": ["127.0.0.1"], "ipv6": ["::1"], "mtu": 65536, "up": True},
                           {"name": "eth0", "ipv4": ["10.0.0.5"], "ipv6": [], "mtu": 1500, "up": True}],
            "default_route": {"ipv4": "eth0", "ipv6": None}}
    base.update(kw)
    return base


def judge_net(facts, **opts):
    return network.NetworkCheck().compare({"n1": facts}, network.NetworkCheck().with_defaults({"min_mtu": 1280, **opts}))


def test_network_gather_on_this_machine():
    facts = network.NetworkCheck().gather(ctx())
    assert facts["hostname"] == socket.gethostname()
    assert any(i["name"] == "lo" for i in facts["interfaces"])
    json.dumps(facts)


def test_network_pass_names_default_route():
    (r,) = judge_net(net_facts())
    assert r.level is Level.PASS and "eth0" in r.summary


def test_hostname_on_loopback_is_flagged_with_ifname_fix():
    res = judge_net(net_facts(resolves={"node1": {"addrs": ["127.0.1.1"], "error": None}}))
    (w,) = only(res, Level.WARN)
    assert "loopback" in w.summary and "GLOO_SOCKET_IFNAME=eth0" in w.fix


def test_unresolvable_name_fails_only_when_several_nodes_expected():
    facts = net_facts(resolves={"node1": {"addrs": None, "error": "gaierror: Name or service not known"}})
    assert only(judge_net(facts), Level.WARN)
    assert only(judge_net(facts, nnodes=4), Level.FAIL)


def test_no_routable_interface_and_small_mtu():
    lo_only = net_facts(interfaces=[{"name": "lo", "ipv4": ["127.0.0.1"], "ipv6": [], "mtu": 65536, "up": True}],
                        default_route={})
    assert "no interface" in only(judge_net(lo_only, nnodes=2), Level.FAIL)[0].summary
    small = net_facts(interfaces=[{"name": "eth0", "ipv4": ["10.0.0.5"], "ipv6": [], "mtu": 576, "up": True}])
    assert "MTU 576" in only(judge_net(small), Level.WARN)[0].summary


def test_default_route_parser_reads_proc():
    import psutil

    routes = network.default_route_ifaces()
    assert set(routes) == {"ipv4", "ipv6"}
    for iface in routes.values():  # whatever the kernel's default route uses is a real interface here
        assert iface is None or iface in psutil.net_if_addrs()


def test_hostname_on_loopback_in_a_cluster_names_no_guessed_interface():
    """One interface advice per screen: in a cluster the names check and the advice pin the interface that
    reaches the master; this node's default route (eth0 here) is only a guess and is not offered."""
    res = judge_net(net_facts(resolves={"node1": {"addrs": ["127.0.1.1"], "error": None}}), nnodes=3)
    (w,) = only(res, Level.WARN)
    assert "loopback" in w.summary and "/etc/hosts" in w.fix
    assert "SOCKET_IFNAME" not in w.fix and "eth0" not in w.fix


def test_a_loopback_hostname_is_fine_when_every_node_shares_this_loopback():
    # torchrun's or --local-nodes' nodes on one machine: gloo's 127.x reaches every peer (the collective passes),
    # so "other nodes cannot reach" is false there; nodes in other namespaces or machines still get the warning
    check = network.NetworkCheck()
    scope = network.NetworkCheck().gather(ctx())["loopback_scope"]
    loop = net_facts(resolves={"node1": {"addrs": ["127.0.0.1"], "error": None}}, loopback_scope=scope)
    opts = check.with_defaults({"nnodes": 2})
    assert {r.level for r in check.compare({"a": loop, "b": loop}, opts)} == {Level.PASS}
    apart = {"a": loop, "b": dict(loop, loopback_scope="0" * 16)}
    assert len(only(check.compare(apart, opts), Level.WARN)) == 2
    assert only(check.compare({"a": loop}, opts), Level.WARN)  # the other node never reported: proves nothing
    assert only(judge_net(loop), Level.WARN)  # one node alone: a multi-node job would advertise 127.x


def test_the_interface_fix_is_spelt_like_the_names_check_and_the_advice():
    """One spelling of the interface advice on every screen: NCCL's '==' (exactly that interface; a single '='
    is a prefix match), as the names check's fix and the lines after a pass write it."""
    res = judge_net(net_facts(resolves={"node1": {"addrs": ["127.0.1.1"], "error": None}}))
    (w,) = only(res, Level.WARN)
    assert "export NCCL_SOCKET_IFNAME==eth0 GLOO_SOCKET_IFNAME=eth0" in w.fix
    # NCCL's exact-match '=' read like a typo (issue 41 item 3): the fix says what it means
    assert "(NCCL's '=eth0' means exactly eth0; without that '=' it would match every interface whose name starts " \
           "with eth0)" in w.fix


def test_one_machine_one_answer_on_its_name_alone_and_with_local_nodes():
    """preflight alone said "vm resolves only to loopback"; --local-nodes 3 on the same machine said "vm resolves
    to a routable address". Both now state the same fact; the judgement differs and says why."""
    check = network.NetworkCheck()
    scope = check.gather(ctx())["loopback_scope"]
    loop = net_facts(hostname="vm", resolves={"vm": {"addrs": ["127.0.1.1"], "error": None}}, loopback_scope=scope)
    (alone,) = only(judge_net(loop), Level.WARN)
    assert "vm resolves only to loopback (127.0.1.1)" in alone.summary and "every rank runs on this machine" in alone.summary
    together = check.compare({"a": loop, "b": loop, "c": loop}, check.with_defaults({"nnodes": 3}))
    assert {r.level for r in together} == {Level.PASS}
    for r in together:
        assert "vm resolves only to loopback (127.0.1.1)" in r.summary and "routable" not in r.summary, r.summary
        assert "all on this machine" in r.summary
