"""The local checks' gather (on this machine, with fakes where the machine lacks something) and their pure
compare rules: torch-build, packages, env-vars, network, resources, clock-sync."""
from __future__ import annotations

import builtins
import json
import socket

import pytest

from ddpdoctor.api import Level, NodeContext, Skip
from ddpdoctor.redact import REDACTED
from ddpdoctor_checks import clock_sync, env_vars, network, packages, resources, torch_build


def ctx(**run):
    return NodeContext(node="n1", run=run)


def levels(results):
    return [r.level for r in results]


def only(results, level):
    return [r for r in results if r.level is level]


# ---------------------------------------------------------------- torch-build
TORCH_OK = {"python_version": "3.11.7", "python_executable": "/usr/bin/python3", "nvidia_driver_present": False,
            "torch_error": None, "torch_version": "2.13.0+cpu", "torch_build": "cpu", "cuda_runtime": None,
            "hip_runtime": None, "nccl_version": None, "gloo_available": True, "nccl_available": False,
            "mpi_available": False}


def judge_torch(facts, **opts):
    return torch_build.TorchBuildCheck().compare({"n1": facts}, torch_build.TorchBuildCheck().with_defaults({"min_python": "3.9", "torch_version": "", **opts}))


def test_torch_build_gathers_real_torch():
    facts = torch_build.TorchBuildCheck().gather(ctx())
    import torch

    assert facts["torch_version"] == torch.__version__
    assert facts["gloo_available"] is True
    assert facts["torch_build"] in ("cpu", "cuda", "rocm")
    json.dumps(facts)


def test_torch_import_failure_is_a_fail_with_a_fix(monkeypatch):
    real_import = builtins.__import__

    def broken(name, *a, **kw):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("libtorch_cpu.so: cannot open shared object file")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", broken)
    facts = torch_build.TorchBuildCheck().gather(ctx())
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert "libtorch_cpu.so" in facts["torch_error"]
    (r,) = judge_torch(facts)
    assert r.level is Level.FAIL and "does not import" in r.summary and "pip install torch" in r.fix


def test_torch_build_passes_and_names_the_build():
    (r,) = judge_torch(TORCH_OK)
    assert r.level is Level.PASS and "2.13.0+cpu" in r.summary and "gloo" in r.summary


def test_cpu_torch_on_a_gpu_node_fails():
    res = judge_torch(dict(TORCH_OK, nvidia_driver_present=True))
    (r,) = only(res, Level.FAIL)
    assert "CPU-only" in r.summary and "download.pytorch.org" in r.fix


def test_missing_gloo_and_nccl_fail():
    res = judge_torch(dict(TORCH_OK, gloo_available=False, torch_build="cuda", cuda_runtime="12.6"))
    summaries = " | ".join(r.summary for r in only(res, Level.FAIL))
    assert "gloo" in summaries and "NCCL" in summaries


def test_required_torch_version_and_old_python():
    res = judge_torch(dict(TORCH_OK, python_version="3.8.10"), torch_version="2.4.0")
    fails = only(res, Level.FAIL)
    assert any("3.8.10" in r.summary for r in fails)
    assert any(r.fix == "pip install torch==2.4.0" for r in fails)
    assert only(judge_torch(TORCH_OK, torch_version="2.13.0"), Level.PASS)


# ---------------------------------------------------------------- packages
def test_packages_gather_lists_pins_with_fingerprint():
    facts = packages.PackagesCheck().gather(ctx())
    assert any(p.startswith("torch==") for p in facts["packages"])
    assert any(p.startswith("click==") for p in facts["packages"])
    assert facts["fingerprint"] == packages.fingerprint(facts["packages"])
    assert facts["count"] == len(facts["packages"])


def test_dist_info_names_agree_with_metadata():
    from importlib import metadata

    for item in packages.installed():
        assert metadata.version(item["name"]) == item["version"], item


def test_packages_missing_required_and_shadowed_copy():
    facts = {"packages": ["click==8.1.7", "torch==2.13.0"], "count": 2, "fingerprint": "x",
             "shadowed": [{"name": "numpy", "used": "2.1.0", "shadowed": "1.26.4", "location": "/home/u/.local"}]}
    res = packages.PackagesCheck().compare({"n1": facts}, packages.PackagesCheck().with_defaults({"required": "torch, NumPy_x"}))
    assert only(res, Level.FAIL)[0].fix == "pip install numpy-x"
    (w,) = only(res, Level.WARN)
    assert "numpy" in w.summary and "1.26.4" in w.summary
    ok = packages.PackagesCheck().compare({"n1": dict(facts, shadowed=[])}, packages.PackagesCheck().with_defaults({"required": "torch"}))
    assert levels(ok) == [Level.PASS]


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


# ---------------------------------------------------------------- resources
def res_facts(**kw):
    base = {"nofile": {"soft": 65536, "hard": 65536}, "memlock": {"soft": None, "hard": None},
            "infiniband": False, "cpu_count": 8, "cpu_affinity": 8,
            "shm": {"path": "/dev/shm", "free_bytes": 16 << 30, "total_bytes": 16 << 30},
            "disk": {"path": "/tmp", "free_bytes": 100 << 30, "total_bytes": 200 << 30},
            "memory": {"total_bytes": 64 << 30, "available_bytes": 60 << 30}}
    base.update(kw)
    return base


def judge_res(facts, **opts):
    check = resources.ResourcesCheck()
    return check.compare({"n1": facts}, {k: o.default for k, o in check.options.items()} | opts)


def test_resources_gather_real(tmp_path):
    facts = resources.ResourcesCheck().gather(NodeContext(node="n1", run={"output_dir": str(tmp_path)}))
    assert facts["shm"]["total_bytes"] > 0 and facts["disk"]["path"] == str(tmp_path)
    assert facts["cpu_count"] >= 1


def test_resources_pass():
    assert levels(judge_res(res_facts())) == [Level.PASS]


def test_docker_default_shm_fails_small_shm_warns():
    docker = res_facts(shm={"path": "/dev/shm", "free_bytes": 64 << 20, "total_bytes": 64 << 20})
    (f,) = only(judge_res(docker), Level.FAIL)
    assert "64 MiB" in f.summary and "--shm-size" in f.fix
    assert only(judge_res(res_facts(shm={"total_bytes": 512 << 20})), Level.WARN)


def test_limits_disk_memory():
    res = judge_res(res_facts(nofile={"soft": 1024, "hard": 4096}, memlock={"soft": 65536, "hard": 65536},
                              infiniband=True, disk={"path": "/x", "free_bytes": 1 << 20},
                              memory={"total_bytes": 4 << 30, "available_bytes": 1 << 29}))
    assert len(only(res, Level.FAIL)) == 1 and "memlock" in only(res, Level.FAIL)[0].fix
    warn = " | ".join(r.summary for r in only(res, Level.WARN))
    assert "open-files" in warn and "free in /x" in warn and "memory available" in warn


# ---------------------------------------------------------------- clock-sync
CHRONY = """Reference ID    : C0A80001 (192.168.0.1)
Stratum         : 3
System time     : 0.000012 seconds fast of NTP time
Leap status     : Normal
"""


def test_chronyc_parser():
    assert clock_sync.parse_chronyc_tracking(CHRONY)["synced"] is True
    unsynced = CHRONY.replace("Normal", "Not synchronised")
    assert clock_sync.parse_chronyc_tracking(unsynced)["synced"] is False
    assert clock_sync.parse_chronyc_tracking("garbage") is None


def test_clock_sync_uses_first_source_that_answers(monkeypatch):
    monkeypatch.setattr(clock_sync, "SOURCES", (lambda: None, lambda: {"tool": "chronyc", "synced": False, "detail": "x"}))
    facts = clock_sync.ClockSyncCheck().gather(ctx())
    (r,) = clock_sync.ClockSyncCheck().compare({"n1": facts}, clock_sync.ClockSyncCheck().with_defaults({"unsynced_level": "warn"}))
    assert r.level is Level.WARN and "set-ntp" in r.fix
    (r,) = clock_sync.ClockSyncCheck().compare({"n1": facts}, clock_sync.ClockSyncCheck().with_defaults({"unsynced_level": "fail"}))
    assert r.level is Level.FAIL


def test_clock_sync_skips_saying_why(monkeypatch):
    monkeypatch.setattr(clock_sync, "SOURCES", (clock_sync.from_timedatectl,))
    monkeypatch.setattr(clock_sync.shutil, "which", lambda name: None)
    with pytest.raises(Skip, match="cannot tell"):
        clock_sync.ClockSyncCheck().gather(ctx())


def test_adjtimex_reads_the_kernel():
    answer = clock_sync.from_adjtimex()  # read-only adjtimex(2) works unprivileged on Linux, in containers too
    assert answer is not None and answer["tool"] == "adjtimex"
    assert isinstance(answer["synced"], bool) and answer["maxerror_us"] >= 0
