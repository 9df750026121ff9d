"""The GPU checks on a real NVIDIA GPU: real NVML, real torch CUDA measurements, the real libnccl.

Skipped without CUDA (the ``gpu`` marker). Assertions are about shapes and agreement between NVML, torch
and NCCL, not about one machine's figures, except for sanity floors."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ddpdoctor.api import Level, NodeContext

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch):
    for var in ("LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.timeout(120)
def test_gpu_check_agrees_with_torch():
    import torch

    from ddpdoctor_checks.gpu import GpuCheck

    n = torch.cuda.device_count()
    f = GpuCheck().gather(NodeContext(node="gpu-node", run={"gpus_per_node": n}))
    assert f["nvml_error"] is None and f["driver_version"] and f["cuda_driver_version"]
    assert f["torch_device_count"] == n and f["visible_count"] == n
    for g in f["gpus"]:
        assert g["uuid"].startswith(("GPU-", "MIG-")) and g["pci_bus_id"] and g["memory_total_bytes"] > 0
        assert g["compute_mode"] in ("default", "exclusive_process", "prohibited")
    results = GpuCheck().compare({"gpu-node": f}, GpuCheck().with_defaults({"gpus_per_node": n}))
    assert not any("usable GPU" in r.summary for r in results), [r.summary for r in results]


@pytest.mark.timeout(120)
def test_gpu_health_reads_every_gpu_and_listens_for_xids():
    from ddpdoctor_checks.gpu_health import GpuHealthCheck

    t0 = time.monotonic()
    f = GpuHealthCheck().gather(NodeContext(node="gpu-node", opts=GpuHealthCheck().with_defaults({"xid_wait_ms": 200})))
    assert time.monotonic() - t0 < 30
    from ddpdoctor_checks.gpu import GpuCheck

    snap = GpuCheck().gather(NodeContext(node="gpu-node"))  # the per-GPU snapshot gpu-health judges (uses)
    assert f["gpus"] and all(g.get("uuid") for g in f["gpus"] if not g.get("lost"))
    assert all(g.get("temperature_c") is not None for g in snap["gpus"] if not g.get("lost"))
    f["uses"] = {"gpu": snap}
    assert f["xid_watch"]["error"] is None and f["xid_watch"]["events"] == []
    results = GpuHealthCheck().compare({"gpu-node": f}, GpuHealthCheck().with_defaults({}))
    assert results and all(r.nodes == ["gpu-node"] for r in results)


@pytest.mark.timeout(180)
def test_gpuperf_one_gpu_in_process_and_uuid_matches_nvml():
    import pynvml

    from ddpdoctor_checks.support import gpuperf

    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        pytest.skip("index mapping check needs CUDA_VISIBLE_DEVICES unset")
    out = gpuperf.measure_gpu(0, gpuperf.PerfConfig(gemm_n=4096, copy_bytes=256 << 20, h2d_bytes=64 << 20, iters=10))
    assert out["gemm_tflops"] > 10 and out["copy_gbps"] > 100 and out["h2d_gbps"] > 3
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    finally:
        pynvml.nvmlShutdown()
    assert out["uuid"] == uuid


@pytest.mark.timeout(240)
def test_gpu_perf_check_measures_every_gpu_within_15_s():
    import torch

    from ddpdoctor_checks.gpu_perf import GpuPerfCheck

    opts = {k: o.default for k, o in GpuPerfCheck.options.items()}
    opts["enabled"] = True
    t0 = time.monotonic()
    f = GpuPerfCheck().gather(NodeContext(node="gpu-node", opts=opts))
    took = time.monotonic() - t0
    assert len(f["gpus"]) == torch.cuda.device_count()
    for g in f["gpus"]:
        assert "error" not in g, g
        assert {"index", "uuid", "name", "gemm_tflops", "copy_gbps", "h2d_gbps"} <= set(g)
    assert took < 15, f"gpu-perf took {took:.1f} s"
    results = GpuPerfCheck().compare({"gpu-node": f}, GpuPerfCheck().with_defaults(opts))
    assert not any(r.level is Level.FAIL for r in results), [r.summary for r in results]


@pytest.mark.timeout(120)
def test_nccl_runtime_finds_the_loaded_library():
    from ddpdoctor_checks.nccl_runtime import NcclRuntimeCheck

    f = NcclRuntimeCheck().gather(NodeContext(node="gpu-node"))
    assert f["torch_nccl_version"]
    if f["libnccl_path"]:  # pip wheels load nvidia/nccl/lib/libnccl.so.2; static builds have none
        assert f["loaded_version"] and f["version_error"] is None


NCCL_ONE_RANK = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % int(os.environ["PORT"]), rank=0, world_size=1,
                        device_id=torch.device("cuda", 0))
t = torch.ones(1024, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize(); dist.destroy_process_group()
"""


@pytest.mark.timeout(180)
def test_parse_nccl_transport_on_a_real_nccl_log():
    import socket

    from ddpdoctor_checks.support.nccl_log import parse_nccl_transport

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, NCCL_DEBUG="INFO", PORT=str(port))
    p = subprocess.run([sys.executable, "-c", NCCL_ONE_RANK], env=env, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stderr[-2000:]
    out = parse_nccl_transport(p.stdout + p.stderr)
    assert out["transport"] in ("NET/IB", "NET/OFI", "NET/Socket"), (p.stdout + p.stderr)[-3000:]
