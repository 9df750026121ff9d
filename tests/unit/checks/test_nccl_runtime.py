"""nccl-runtime: the loaded libnccl (real ctypes call on a stand-in library), sysfs fabric, and the rules."""
from __future__ import annotations

import shutil
import subprocess
import sys
import types

import pytest
from ddpdoctor_checks import nccl_runtime as nr
from ddpdoctor_checks.nccl_runtime import (
    NcclRuntimeCheck,
    decode_nccl_version,
    torch_nccl_version,
)

from ddpdoctor.api import Level, NodeContext, Skip


def test_version_decoding():
    assert decode_nccl_version(22809) == "2.28.9" and decode_nccl_version(21805) == "2.18.5"
    assert decode_nccl_version(2708) == "2.7.8"
    assert torch_nccl_version((2, 21, 5)) == "2.21.5" and torch_nccl_version(2708) == "2.7.8"
    assert torch_nccl_version(None) is None


@pytest.fixture(scope="module")
def fake_libnccl(tmp_path_factory):
    """A real shared library named libnccl.so.2 whose ncclGetVersion answers 22809."""
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    d = tmp_path_factory.mktemp("nccl")
    src = d / "nccl.c"
    src.write_text("int ncclGetVersion(int *v) { *v = 22809; return 0; }\n")
    lib = d / "libnccl.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=60)
    return str(lib)


def test_nccl_get_version_through_ctypes(fake_libnccl, tmp_path):
    assert nr.nccl_get_version(fake_libnccl) == ("2.28.9", None)
    version, err = nr.nccl_get_version(str(tmp_path / "missing.so"))
    assert version is None and "OSError" in err


def test_mapped_libnccl_reads_proc_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /venv/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "7f04-7f05 rw-p 00000000 00:00 0 \n")
    assert nr.mapped_libnccl(str(maps)) == "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libnccl-net.so\n")
    assert nr.mapped_libnccl(str(maps)) is None
    assert nr.mapped_libnccl(str(tmp_path / "nope")) is None


def _ib_dev(root, name, driver, states):
    dev = root / name
    (dev / "device").mkdir(parents=True)
    drv = root.parent / "drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    (dev / "device" / "driver").symlink_to(drv)
    for i, state in enumerate(states, 1):
        p = dev / "ports" / str(i)
        p.mkdir(parents=True)
        (p / "state").write_text(state + "\n")
        (p / "link_layer").write_text("InfiniBand\n")
        (p / "rate").write_text("400 Gb/sec (4X NDR)\n")


def test_rdma_devices_from_sysfs(tmp_path):
    root = tmp_path / "infiniband"
    _ib_dev(root, "mlx5_0", "mlx5_core", ["4: ACTIVE"])
    _ib_dev(root, "rdmap16s27", "efa", ["4: ACTIVE"])
    devs = nr.rdma_devices(str(root))
    assert [(d["name"], d["driver"], d["efa"]) for d in devs] == [("mlx5_0", "mlx5_core", False), ("rdmap16s27", "efa", True)]
    assert devs[0]["ports"] == [{"port": "1", "state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}]
    fab = NcclRuntimeCheck.fabric(str(root))
    assert fab["ib_devices"] == ["mlx5_0"] and fab["efa"] is True
    assert nr.rdma_devices(str(tmp_path / "none")) == []


def test_net_plugins_on_ld_library_path(tmp_path, monkeypatch):
    (tmp_path / "libnccl-net-ofi.so").write_text("")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{tmp_path}:/nonexistent")
    assert nr.net_plugins(extra_dirs=()) == [str(tmp_path / "libnccl-net-ofi.so")]


def test_cpu_torch_is_a_skip():
    import torch

    if torch.version.cuda:
        pytest.skip("CUDA build of torch")
    with pytest.raises(Skip, match="CPU build"):
        NcclRuntimeCheck().gather(NodeContext(node="n1"))


def test_gather_with_a_cuda_torch_reads_the_loaded_library(monkeypatch, fake_libnccl):
    fake_torch = types.SimpleNamespace(__version__="2.5.1+cu124", version=types.SimpleNamespace(cuda="12.4"),
                                       cuda=types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 21, 5))))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(nr, "mapped_libnccl", lambda: fake_libnccl)
    f = NcclRuntimeCheck().gather(NodeContext(node="n1"))
    assert f["torch_nccl_version"] == "2.21.5" and f["loaded_version"] == "2.28.9" and f["loaded"] is True
    [r] = NcclRuntimeCheck().compare({"n1": f}, NcclRuntimeCheck().with_defaults({}))
    assert r.level is Level.WARN and "loads NCCL 2.28.9 from" in r.summary and "built with 2.21.5" in r.summary
    assert "nvidia-nccl-cu12==2.21.5" in r.fix


def facts(**kw):
    base = {"torch_nccl_version": "2.21.5", "loaded_version": "2.21.5", "loaded": True, "version_error": None,
            "libnccl_path": "/v/nvidia/nccl/lib/libnccl.so.2", "rdma_devices": [], "ib_devices": [], "efa": False,
            "dev_infiniband": False, "net_plugins": [], "env": {}}
    base.update(kw)
    return base


def bad(results):
    return [r for r in results if r.level in (Level.WARN, Level.FAIL)]


IB_DEV = [{"name": "mlx5_0", "driver": "mlx5_core", "efa": False, "ports": [{"port": "1", "state": "4: ACTIVE"}]}]
EFA_DEV = [{"name": "rdmap0s31", "driver": "efa", "efa": True, "ports": [{"port": "1", "state": "4: ACTIVE"}]}]


def test_matching_versions_pass():
    [r] = NcclRuntimeCheck().compare({"n1": facts()}, NcclRuntimeCheck().with_defaults({}))
    assert r.level is Level.PASS and "NCCL 2.21.5 loaded from /v/nvidia" in r.summary and "no IB/EFA" in r.summary


def test_version_mismatch_across_nodes_fails_the_odd_node():
    fs = {"a": facts(), "b": facts(), "c": facts(loaded_version="2.18.3", torch_nccl_version="2.18.3")}
    [r] = bad(NcclRuntimeCheck().compare(fs, NcclRuntimeCheck().with_defaults({})))
    assert r.level is Level.FAIL and r.nodes == ["c"] and r.actual == "2.18.3" and r.expected == "2.21.5"
    assert bad(NcclRuntimeCheck().compare(fs, NcclRuntimeCheck().with_defaults({"require_same_version": False}))) == []


def test_rdma_without_dev_infiniband_and_down_ports_warn():
    down = [{"name": "mlx5_1", "driver": "mlx5_core", "efa": False, "ports": [{"port": "1", "state": "1: DOWN"}]}]
    found = bad(NcclRuntimeCheck().compare({"n1": facts(rdma_devices=IB_DEV + down, ib_devices=["mlx5_0", "mlx5_1"])}, NcclRuntimeCheck().with_defaults({})))
    assert len(found) == 2
    assert "no /dev/infiniband" in found[0].summary and "--device /dev/infiniband" in found[0].fix
    assert "no ACTIVE port: mlx5_1" in found[1].summary and "NCCL_IB_HCA=^mlx5_1" in found[1].fix


def test_efa_without_plugin_warns():
    [r] = bad(NcclRuntimeCheck().compare({"n1": facts(rdma_devices=EFA_DEV, efa=True, dev_infiniband=True)}, NcclRuntimeCheck().with_defaults({})))
    assert "EFA devices but no NCCL net plugin" in r.summary and "ofi-nccl" in r.fix
    ok = facts(rdma_devices=EFA_DEV, efa=True, dev_infiniband=True, net_plugins=["/opt/amazon/ofi-nccl/lib/libnccl-net.so"])
    assert bad(NcclRuntimeCheck().compare({"n1": ok}, NcclRuntimeCheck().with_defaults({}))) == []


def test_socket_transport_from_the_collective_check_with_ib_warns():
    coll = {"runs": [{"backend": "gloo", "ok": True}, {"backend": "nccl", "ok": True, "transport": "NET/Socket"}]}
    f = facts(rdma_devices=IB_DEV, ib_devices=["mlx5_0"], dev_infiniband=True, uses={"collective": coll})
    [r] = bad(NcclRuntimeCheck().compare({"n1": f}, NcclRuntimeCheck().with_defaults({})))
    assert r.level is Level.WARN and "TCP sockets" in r.summary and "NCCL_IB_HCA=mlx5_0" in r.fix
    coll["runs"][1]["transport"] = "NET/IB"
    [r] = NcclRuntimeCheck().compare({"n1": f}, NcclRuntimeCheck().with_defaults({}))
    assert r.level is Level.PASS and "transport NET/IB" in r.summary


def test_the_fix_names_the_nccl_wheel_of_torchs_cuda(monkeypatch, fake_libnccl):
    """torch 2.15.0 is built for CUDA 13 (2.15.0+cu132, NCCL as nvidia-nccl-cu13): a pin of the cu12 wheel would
    install a library that torch does not load."""
    fake_torch = types.SimpleNamespace(__version__="2.15.0+cu132", version=types.SimpleNamespace(cuda="13.2"),
                                       cuda=types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 30, 7))))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(nr, "mapped_libnccl", lambda: fake_libnccl)
    f = NcclRuntimeCheck().gather(NodeContext(node="n1"))
    [r] = NcclRuntimeCheck().compare({"n1": f}, NcclRuntimeCheck().with_defaults({}))
    assert "nvidia-nccl-cu13==2.30.7" in r.fix and "cu12" not in r.fix
    assert nr.nccl_wheel({}) == "nvidia-nccl-cu12" and nr.nccl_wheel({"torch_cuda": "12.6"}) == "nvidia-nccl-cu12"
