"""More compare rules of the cluster checks with plain dicts: the unreachable class, error bars at the fail
threshold, *_SOCKET_IFNAME syntax, node-specific env vars, ties, differing nnodes, an unwritable shared dir."""
from __future__ import annotations

from ddpdoctor.api import Level
from ddpdoctor.cluster.endpoint import FIXES
from ddpdoctor_checks.clock_skew import ClockSkewCheck
from ddpdoctor_checks.collective import CollectiveCheck
from ddpdoctor_checks.launch_args import LaunchArgsCheck
from ddpdoctor_checks.mesh import PORTS_NOTE, MeshCheck
from ddpdoctor_checks.names import NamesCheck
from ddpdoctor_checks.parity import ParityCheck
from ddpdoctor_checks.shared_dir import SharedDirCheck

from test_cluster_checks import launch, names_facts, parity_node, probe


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


def test_clock_skew_error_bar_at_the_fail_threshold():
    facts = {"slow-link": {"offset_ms": -1050.0, "bound_ms": 100.0},  # at least 950 ms: warn, not fail
             "sure": {"offset_ms": -1050.0, "bound_ms": 10.0}}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(facts, ClockSkewCheck().with_defaults({"warn_ms": 100.0, "fail_ms": 1000.0}))}
    assert res["slow-link"].level is Level.WARN and res["sure"].level is Level.FAIL
    assert "1050.00 ms ± 10.00 ms behind" in res["sure"].summary
    assert res["sure"].actual == {"offset_ms": -1050.0, "bound_ms": 10.0}
    custom = ClockSkewCheck().compare({"n": {"offset_ms": 60.0, "bound_ms": 1.0}}, ClockSkewCheck().with_defaults({"warn_ms": 10, "fail_ms": 50}))
    assert custom[0].level is Level.FAIL  # thresholds are configurable


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


def test_parity_node_specific_and_ifname_env_vars_are_not_failures_and_soft_vars_warn():
    a = parity_node(env={"HOSTNAME": "a", "NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "8"})
    b = parity_node(env={"HOSTNAME": "b", "NCCL_SOCKET_IFNAME": "ib0", "OMP_NUM_THREADS": "8"})
    c = parity_node(env={"HOSTNAME": "c", "NCCL_SOCKET_IFNAME": "eth1", "OMP_NUM_THREADS": "4"})
    res = ParityCheck().compare({"a": a, "b": b, "c": c}, ParityCheck().with_defaults({}))
    assert levels(res, Level.FAIL) == []
    (warn,) = levels(res, Level.WARN)
    assert warn.nodes == ["c"] and "OMP_NUM_THREADS" in warn.summary and "'4' vs '8'" in warn.summary


def test_parity_missing_package_and_gpu_model():
    c = parity_node(pkgs=(), model="A100")
    res = ParityCheck().compare({"a": parity_node(), "b": parity_node(), "c": c}, ParityCheck().with_defaults({}))
    (pkg,) = levels(res, Level.FAIL)
    assert pkg.nodes == ["c"] and "numpy (missing) (others: 2.1.0)" in pkg.summary
    assert pkg.fix == "on c: pip install 'numpy==2.1.0'"  # the majority's version, pasteable
    extra = ParityCheck().compare({"a": parity_node(), "b": parity_node(), "d": parity_node(pkgs=("numpy==2.1.0",
                                                                                                 "evil==1"))}, ParityCheck().with_defaults({}))
    (odd,) = levels(extra, Level.FAIL)
    assert "evil 1 (others: (missing))" in odd.summary
    assert odd.fix == "on d: install the same packages as the other nodes"  # nothing to pin for an extra one
    (model,) = levels(res, Level.WARN)
    assert model.nodes == ["c"] and "A100" in model.summary


def test_parity_tie_of_two_is_reported_on_one_node_deterministically():
    a, b = parity_node(torch="2.13.0"), parity_node(torch="2.4.0")
    first = [(r.nodes, r.summary) for r in levels(ParityCheck().compare({"a": a, "b": b}, ParityCheck().with_defaults({})), Level.FAIL)]
    again = [(r.nodes, r.summary) for r in levels(ParityCheck().compare({"b": b, "a": a}, ParityCheck().with_defaults({})), Level.FAIL)]
    assert first and sorted(first) == sorted(again)
    assert all(nodes == ["b"] or nodes == ["a"] for nodes, _ in first)
    assert any("'2.13.0'" in s and "'2.4.0'" in s for _, s in first)  # both values shown


def test_launch_args_differing_nnodes_names_the_odd_node():
    res = LaunchArgsCheck().compare({"a": launch(0), "b": launch(1), "c": launch(2, nnodes=3)}, LaunchArgsCheck().with_defaults({}))
    (f,) = levels(res, Level.FAIL)
    assert f.nodes == ["c"] and f.actual == 3 and f.expected == 2 and "--nnodes 2" in f.fix
    ok = LaunchArgsCheck().compare({"a": launch(0), "b": launch(1)}, LaunchArgsCheck().with_defaults({}))
    assert [r.level for r in ok] == [Level.PASS] and "--nnodes 2," in ok[0].summary


def test_shared_dir_unwritable_on_the_master():
    facts = {"m": {"path": "/ckpt", "fstype": "nfs4", "mountpoint": "/ckpt", "seen": False,
                   "error": "the master could not write there: unwritable PermissionError"}}
    (f,) = SharedDirCheck().compare(facts, SharedDirCheck().with_defaults({}))
    assert f.level is Level.FAIL and "could not write" in f.summary and "writable" in f.fix


def test_collective_slow_gloo_warns_only_below_the_floor():
    run = {"backend": "gloo", "ok": True, "result": 1.0, "busbw_gbps": 0.5, "time_us": 100, "init_s": 0.1}
    (warn,) = CollectiveCheck().compare({"a": {"runs": [run]}}, CollectiveCheck().with_defaults({"min_busbw_gbps": 1.0}))
    assert warn.level is Level.WARN and "GLOO_SOCKET_IFNAME" in warn.fix
    (ok,) = CollectiveCheck().compare({"a": {"runs": [run]}}, CollectiveCheck().with_defaults({"min_busbw_gbps": 0.0}))
    assert ok.level is Level.PASS
