"""The cluster checks' pure compare rules with plain dicts: which node is named, the level, actual vs
expected, and a fix: mesh, clock-skew, names, parity, launch-args, shared-dir, collective."""
from __future__ import annotations

from ddpdoctor.api import Level
from ddpdoctor_checks.clock_skew import ClockSkewCheck
from ddpdoctor_checks.collective import CollectiveCheck
from ddpdoctor_checks.env_vars import EnvVarsCheck
from ddpdoctor_checks.gpu import GpuCheck
from ddpdoctor_checks.launch_args import LaunchArgsCheck
from ddpdoctor_checks.mesh import MeshCheck
from ddpdoctor_checks.names import NamesCheck
from ddpdoctor_checks.packages import PackagesCheck
from ddpdoctor_checks.parity import ParityCheck
from ddpdoctor_checks.shared_dir import SharedDirCheck
from ddpdoctor_checks.torch_build import TorchBuildCheck


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


def test_clock_skew_uses_the_error_bar():
    facts = {"m": {"offset_ms": 0.0, "bound_ms": 0.0, "reference": True},
             "ok": {"offset_ms": 120.0, "bound_ms": 30.0},  # might be 90 ms: not proven beyond 100 ms
             "warn": {"offset_ms": -300.0, "bound_ms": 1.0},
             "bad": {"offset_ms": 4000.0, "bound_ms": 2.0},
             "silent": {"offset_ms": None, "error": "TimeoutError: timed out"}}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(facts, ClockSkewCheck().with_defaults({"warn_ms": 100.0, "fail_ms": 1000.0}))}
    assert res["ok"].level is Level.PASS and res["warn"].level is Level.WARN and res["bad"].level is Level.FAIL
    assert "ahead of" in res["bad"].summary and "behind" in res["warn"].summary and "ntp" in res["bad"].fix.lower()
    assert res["silent"].level is Level.WARN and "no clock sample" in res["silent"].summary


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


def parity_node(torch="2.13.0", pkgs=("numpy==2.1.0",), env=None, gpus=8, model="H100"):
    """One node's parity facts: its own, and every check's comparables (what the runner hands parity)."""
    own = {"ddpdoctor": "0.1.0", "checks": ["mesh", "parity"]}
    facts = {"torch-build": {"torch_version": torch, "python_version": "3.11.7", "torch_path": "/x"},
             "packages": {"packages": [f"torch=={torch}", *pkgs]},
             "env-vars": {"vars": {"NCCL_IB_HCA": "mlx5", **(env or {})}},
             "gpu": {"driver_version": "550.54", "gpus": [{"name": model}] * gpus}, "parity": own}
    checks = {"torch-build": TorchBuildCheck(), "packages": PackagesCheck(), "env-vars": EnvVarsCheck(),
              "gpu": GpuCheck(), "parity": ParityCheck()}
    return {**own, "comparable": {name: checks[name].comparable(f) for name, f in facts.items()}}


def test_parity_names_the_odd_node_with_both_values():
    facts = {"a": parity_node(), "b": parity_node(), "c": parity_node(torch="2.4.0", env={"NCCL_IB_HCA": "mlx4"},
                                                                       gpus=4)}
    res = fails(ParityCheck().compare(facts, ParityCheck().with_defaults({})))
    assert {r.nodes[0] for r in res} == {"c"}
    text = " | ".join(r.summary for r in res)
    assert "'2.4.0' vs '2.13.0'" in text and "NCCL_IB_HCA" in text and "GPU count" in text
    pkg = next(r for r in res if r.summary.startswith("packages on c"))
    assert "pip install 'torch==2.13.0'" in pkg.fix
    same = ParityCheck().compare({"a": parity_node(), "b": parity_node()}, ParityCheck().with_defaults({}))
    assert [r.level for r in same] == [Level.PASS]
    assert ParityCheck().compare({"a": parity_node()}, ParityCheck().with_defaults({}))[0].level is Level.SKIP


def launch(rank, nnodes=2, nproc=8, rdzv="job1", endpoint="n0:29500"):
    return {"rank": rank, "claim": 1, "launcher": None,
            "launch": {"nnodes": nnodes, "nproc_per_node": nproc, "rdzv_id": rdzv, "endpoint": endpoint}}


def test_launch_args_differences_and_duplicate_ranks():
    res = fails(LaunchArgsCheck().compare({"a": launch(0), "b": launch(1), "c": launch(1, nproc=4, rdzv="x")}, LaunchArgsCheck().with_defaults({})))
    text = " | ".join(r.summary for r in res)
    assert "c intends --nproc-per-node 4" in text and "--rdzv-id x," in text and "claim node rank 1" in text
    dup = next(r for r in res if "claim" in r.summary)
    assert dup.nodes == ["b", "c"] and "--node-rank" in dup.fix


def test_shared_dir_names_the_node_that_cannot_see_the_file():
    facts = {"m": {"path": "/ckpt", "fstype": "nfs4", "mountpoint": "/ckpt", "seen": True, "seconds": 0.0},
             "w": {"path": "/ckpt", "fstype": "ext4", "mountpoint": "/", "seen": False}}
    res = SharedDirCheck().compare(facts, SharedDirCheck().with_defaults({"visible_within_s": 10.0}))
    (f,) = fails(res)
    assert f.nodes == ["w"] and "ext4" in f.summary and "mount shared storage" in f.fix


def test_collective_wrong_sum_and_failure():
    facts = {"a": {"runs": [{"backend": "gloo", "ok": True, "result": 3.0, "busbw_gbps": 1.2, "time_us": 900,
                             "init_s": 0.2}]},
             "b": {"runs": [{"backend": "gloo", "ok": False, "result_ok": False, "result": 2.0}]},
             "c": {"runs": [{"backend": "nccl", "ok": False, "error": "DistBackendError: NCCL error",
                             "first_warn": "NCCL WARN Net : Connection closed"}]}}
    res = {r.nodes[0]: r for r in CollectiveCheck().compare(facts, CollectiveCheck().with_defaults({"min_busbw_gbps": 0.0}))}
    assert res["a"].level is Level.PASS and "sum of ranks correct" in res["a"].summary
    assert res["b"].level is Level.FAIL and "wrong data" in res["b"].summary
    assert res["c"].level is Level.FAIL and "NCCL WARN" in res["c"].summary
