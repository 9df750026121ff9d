"""Unit tests of checks/parity.py."""
from __future__ import annotations

import pytest

from ddpdoctor_checks.env_vars import EnvVarsCheck
from ddpdoctor_checks.gpu import GpuCheck
from ddpdoctor_checks.packages import PackagesCheck
from ddpdoctor_checks.parity import ParityCheck
from ddpdoctor_checks.torch_build import TorchBuildCheck

from ddpdoctor.api import Level


def fails(results):
    return [r for r in results if r.level is Level.FAIL]


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


def levels(results, level):
    return [r for r in results if r.level is level]


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


def test_parity_tie_of_two_names_both_nodes_deterministically():
    # issue 20: two nodes have no majority; the tie used to be broken by sort order, blaming one node.
    a, b = parity_node(torch="2.13.0"), parity_node(torch="2.4.0")
    first = [(r.nodes, r.summary) for r in levels(ParityCheck().compare({"a": a, "b": b}, ParityCheck().with_defaults({})), Level.FAIL)]
    again = [(r.nodes, r.summary) for r in levels(ParityCheck().compare({"b": b, "a": a}, ParityCheck().with_defaults({})), Level.FAIL)]
    assert first and sorted(first) == sorted(again)
    assert all(nodes == ["a", "b"] for nodes, _ in first)  # every side named, none picked
    assert all("no majority" in s for _, s in first)
    assert any("'2.13.0'" in s and "'2.4.0'" in s for _, s in first)  # both values shown


# ---- issue 20: two nodes, ties and --baseline -----------------------------------------------------------
BASELINE = {"file": "good/cluster.json", "nodes": ["g1", "g2"], "verdict": "pass",
            "comparable": {"torch-build": {"torch_version": ["2.13.0"]},
                           "packages": {"numpy": ["2.4.6"], "torch": ["2.13.0"]}}}


def test_two_nodes_with_a_package_shadowed_on_one_name_both_and_pin_nothing():
    """The issue's case: numpy 2.1.3 shadows the venv's 2.4.6 on node2; the healthy node1 was told to downgrade."""
    node1, node2 = parity_node(pkgs=("numpy==2.4.6",)), parity_node(pkgs=("numpy==2.1.3",))
    (pkg,) = fails(ParityCheck().compare({"node1": node1, "node2": node2}, ParityCheck().with_defaults({})))
    assert pkg.nodes == ["node1", "node2"] and "no majority" in pkg.summary
    assert "numpy: 2.4.6 on node1; 2.1.3 on node2" in pkg.summary
    assert "pip install '" not in pkg.fix and "--baseline" in pkg.fix


def test_the_baseline_names_the_odd_node_of_two_and_a_whole_cluster_that_moved():
    node1, node2 = parity_node(pkgs=("numpy==2.4.6",)), parity_node(pkgs=("numpy==2.1.3",))
    opts = ParityCheck().with_defaults({"baseline": BASELINE})
    (pkg,) = fails(ParityCheck().compare({"node1": node1, "node2": node2}, opts))
    assert pkg.nodes == ["node2"] and "differ from the baseline good/cluster.json" in pkg.summary
    assert "numpy 2.1.3 (baseline: 2.4.6)" in pkg.summary and pkg.fix.startswith("on node2: pip install 'numpy==2.4.6'")
    moved = {n: parity_node(torch="2.14.0", pkgs=("numpy==2.4.6",)) for n in ("a", "b", "c")}
    res = fails(ParityCheck().compare(moved, opts))
    build = next(r for r in res if r.summary.startswith("torch-build torch_version"))
    assert build.nodes == ["a", "b", "c"] and "'2.14.0' vs '2.13.0'" in build.summary
    (pkgs,) = [r for r in res if r.summary.startswith("packages")]
    assert pkgs.nodes == ["a", "b", "c"] and "torch 2.14.0 (baseline: 2.13.0)" in pkgs.summary  # one finding
    # what the baseline says nothing about is still judged by the majority (here: all agree)
    assert not [r for r in res if "GPU" in r.summary or "env" in r.summary]


def test_one_node_with_a_baseline_is_compared_and_without_one_skipped():
    (skip,) = ParityCheck().compare({"a": parity_node()}, ParityCheck().with_defaults({}))
    assert skip.level is Level.SKIP
    res = ParityCheck().compare({"a": parity_node(torch="2.12.0")}, ParityCheck().with_defaults({"baseline": BASELINE}))
    assert any(r.level is Level.FAIL and r.nodes == ["a"] for r in res)
    (ok,) = ParityCheck().compare({"a": parity_node(pkgs=("numpy==2.4.6",))},
                                  ParityCheck().with_defaults({"baseline": BASELINE}))
    assert ok.level is Level.PASS and "as in the baseline good/cluster.json" in ok.summary


def test_gpu_counts_differ_legally_when_each_node_says_how_many_processes_it_starts():
    a, b = parity_node(gpus=4), parity_node(gpus=2)
    for node in (a, b):  # what the gpu check's comparable gives a node that knows its process count
        node["comparable"]["gpu"].pop("count")
    assert [r.level for r in ParityCheck().compare({"a": a, "b": b}, ParityCheck().with_defaults({}))] == [Level.PASS]


def test_a_baseline_whose_own_nodes_differed_does_not_pass_nodes_that_now_differ():
    """A baseline taken from a run whose nodes differed (NCCL_IB_HCA mlx5 and mlx4; numpy 2.4.6 and 2.1.3)
    accepts each value; nodes of the new run that differ among themselves are still a difference (seen: two
    nodes with NCCL_IB_DISABLE 1 and 0 passed as '2 nodes run the same software, as in the baseline')."""
    mixed = {"file": "mixed/cluster.json", "nodes": ["g1", "g2"], "verdict": "fail",
             "comparable": {"env-vars": {"NCCL_IB_HCA": ["mlx5", "mlx4"]}, "packages": {"numpy": ["2.4.6", "2.1.3"], "torch": ["2.13.0"]}}}
    opts = ParityCheck().with_defaults({"baseline": mixed})
    two = {"node1": parity_node(pkgs=("numpy==2.4.6",)),
           "node2": parity_node(pkgs=("numpy==2.1.3",), env={"NCCL_IB_HCA": "mlx4"})}
    res = fails(ParityCheck().compare(two, opts))
    env = next(r for r in res if "NCCL_IB_HCA" in r.summary)
    assert env.nodes == ["node1", "node2"] and "no majority" in env.summary
    assert "mixed/cluster.json has each of these values: its own nodes differed" in env.summary
    pkg = next(r for r in res if r.summary.startswith("packages"))
    assert pkg.nodes == ["node1", "node2"] and "no majority" in pkg.summary and "pip install '" not in pkg.fix
    three = {"a": parity_node(pkgs=("numpy==2.4.6",)), "b": parity_node(pkgs=("numpy==2.4.6",)),
             "c": parity_node(pkgs=("numpy==2.1.3",))}
    (pkg,) = fails(ParityCheck().compare(three, opts))
    assert pkg.nodes == ["c"] and "differ from the majority: numpy 2.1.3 (others: 2.4.6)" in pkg.summary
    assert "baseline" not in pkg.summary and "baseline" not in pkg.fix
    # values the baseline accepts, held by every node alike, still pass as in the baseline
    (ok,) = ParityCheck().compare({"a": parity_node(pkgs=("numpy==2.1.3",)), "b": parity_node(pkgs=("numpy==2.1.3",))},
                                  opts)
    assert ok.level is Level.PASS and "as in the baseline mixed/cluster.json" in ok.summary


@pytest.mark.timeout(60)
def test_code_fingerprint_skips_fifos_and_bounds_its_walk(tmp_path, monkeypatch):
    """A FIFO in the code directory blocked the hash's read forever; 3000 nested folders overflowed os.walk."""
    import os
    import subprocess

    from ddpdoctor_checks import parity

    (tmp_path / "train.py").write_text("print(1)\n")
    os.mkfifo(tmp_path / "pipe")
    monkeypatch.setattr(parity, "CODE_WALK_DEPTH", 8)
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1200):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    try:
        out = parity.code_fingerprint(str(tmp_path))
        assert out["kind"] == "content" and out["files"] == 1 and out["partial"], out
    finally:
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=False, timeout=60)
