"""Unit tests of checks/env_vars.py."""
from __future__ import annotations

import json

import pytest
from ddpdoctor_checks import (
    env_vars,
)

from ddpdoctor.api import Level
from ddpdoctor.redaction import REDACTED
from tests.unit.helpers import ctx, levels, only


# ---------------------------------------------------------------- env-vars
def judge_env(env, ifaces=("lo", "eth0", "ib0"), **opts):
    return env_vars.judge_env(env_vars.EnvVarsCheck(), "n1", env, list(ifaces), opts)


def test_env_gather_redacts_secrets(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("TORCH_HUB_TOKEN", "abc")
    monkeypatch.setenv("MASTER_ADDR", "https://user:hunter2@example.com")
    monkeypatch.setenv("UNRELATED_THING", "x")
    facts = env_vars.EnvVarsCheck().gather(ctx())
    assert facts["vars"]["NCCL_DEBUG"] == "INFO"
    assert facts["vars"]["TORCH_HUB_TOKEN"] == REDACTED
    assert "hunter2" not in json.dumps(facts)
    assert "UNRELATED_THING" not in facts["vars"]
    assert "lo" in facts["ifaces"]


@pytest.mark.parametrize("env,needle", [
    ({"NCCL_SOCKET_IFNAME": "eth9"}, "matches no interface"),
    ({"GLOO_SOCKET_IFNAME": "^docker,lo"}, "one concrete interface"),
    ({"GLOO_SOCKET_IFNAME": "eth1"}, "matches no interface"),
    ({"RANK": "1"}, "WORLD_SIZE is not"),
    ({"MASTER_ADDR": "localhost", "SLURM_NNODES": "4"}, "other nodes would dial themselves"),
    ({"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, "2-node job"),
    ({"MASTER_PORT": "eighty"}, "not a TCP port"),
])
def test_env_sanity_failures(env, needle):
    fails = only(judge_env(env), Level.FAIL)
    assert len(fails) == 1 and needle in fails[0].summary, [r.summary for r in fails]
    assert fails[0].fix and fails[0].nodes == ["n1"]


def test_env_accepts_good_settings():
    env = {"NCCL_SOCKET_IFNAME": "^docker,lo", "GLOO_SOCKET_IFNAME": "eth0", "MASTER_ADDR": "localhost",
           "RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}
    assert levels(judge_env(env)) == [Level.PASS]
    assert levels(judge_env({"NCCL_SOCKET_IFNAME": "=ib0"})) == [Level.PASS]


def test_env_warns_on_slow_debug_settings_and_empty_cvd():
    res = judge_env({"NCCL_P2P_DISABLE": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert len(only(res, Level.WARN)) == 2


def test_env_localhost_is_fine_on_one_node():
    assert levels(judge_env({"MASTER_ADDR": "localhost"}, nnodes=1)) == [Level.PASS]
    assert only(judge_env({"MASTER_ADDR": "localhost"}, nnodes=2), Level.FAIL)


def test_loopback_master_addr_of_nodes_on_one_machine_is_legal():
    # torchrun --nnodes 2 --local-addr 127.0.0.2/3 on one machine sets MASTER_ADDR=127.0.0.2 on both nodes: they
    # share one loopback, so it reaches the master (the nodes met through it); on two machines it cannot
    check = env_vars.EnvVarsCheck()
    facts = check.gather(ctx())
    assert len(facts["loopback_scope"]) == 16
    env = {"MASTER_ADDR": "127.0.0.2", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    same = {n: dict(facts, vars=env) for n in ("a", "b")}
    assert levels(check.compare(same, check.with_defaults({"nnodes": 2}))) == [Level.PASS, Level.PASS]
    apart = dict(same, b=dict(facts, vars=env, loopback_scope="0" * 16))
    fails = only(check.compare(apart, check.with_defaults({"nnodes": 2})), Level.FAIL)
    assert {tuple(r.nodes) for r in fails} == {("a",), ("b",)} and "dial themselves" in fails[0].summary
    # one node's facts (the others never joined) prove nothing: still a fail
    assert only(check.compare({"a": same["a"]}, check.with_defaults({"nnodes": 2})), Level.FAIL)
    unknown = {n: dict(f, loopback_scope=None) for n, f in same.items()}
    assert len(only(check.compare(unknown, check.with_defaults({"nnodes": 2})), Level.FAIL)) == 2


def test_torchrun_with_different_processes_per_node_is_no_drift_and_no_4_node_job():
    # torchrun --nproc-per-node 3 on one node and 1 on the other: WORLD_SIZE 4 // LOCAL_WORLD_SIZE 1 read as a
    # "4-node job", and OMP_NUM_THREADS=1 (torchrun's own default where nproc > 1) as drift between the nodes
    check = env_vars.EnvVarsCheck()
    common = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.1", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2"}
    three = dict(common, LOCAL_WORLD_SIZE="3", OMP_NUM_THREADS="1")
    one = dict(common, LOCAL_WORLD_SIZE="1")
    assert env_vars.expected_nodes(one, {}) == 2
    assert env_vars.wanted("GROUP_WORLD_SIZE")  # gathered, so the compare on the master sees it
    assert check.comparable({"vars": three}) == check.comparable({"vars": one})
    # set by the user to another value, or outside torchrun, it is compared as before
    assert check.comparable({"vars": dict(three, OMP_NUM_THREADS="8")})["OMP_NUM_THREADS"] == "8"
    assert check.comparable({"vars": {"OMP_NUM_THREADS": "1"}}) == {"OMP_NUM_THREADS": "1"}
