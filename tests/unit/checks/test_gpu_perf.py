"""gpu-perf: judging synthetic figures (SKU table, peer outliers at 8 and 512 GPUs) and the worker plumbing."""
from __future__ import annotations

import json
import sys

import pytest
from ddpdoctor_checks.gpu_perf import GpuPerfCheck, reference_for

from ddpdoctor_checks.support import gpuperf
from ddpdoctor.api import Level, NodeContext, Skip

H100 = "NVIDIA H100 80GB HBM3"
GOOD = {"gemm_tflops": 780.0, "copy_gbps": 2975.0, "h2d_gbps": 54.5}


def gpu(i, name=H100, **figs):
    return {"index": i, "uuid": f"GPU-{i:04d}", "name": name, "pci_bus_id": f"00000000:{i % 256:02X}:00.0",
            **{**GOOD, **figs}}


def cluster(nodes, per_node, slow=None):
    """{node: facts}; ``slow`` = (node, index, metric, value) overrides one GPU's figure."""
    facts = {}
    for n in range(nodes):
        gs = [gpu(i) for i in range(per_node)]
        facts[f"node{n:03d}"] = {"gpus": gs}
    if slow:
        node, index, metric, value = slow
        facts[node]["gpus"][index][metric] = value
    return facts


def bad(results):
    return [r for r in results if r.level in (Level.WARN, Level.FAIL)]


OPTS = {k: o.default for k, o in GpuPerfCheck.options.items()}


@pytest.mark.parametrize("nodes,per_node", [(1, 8), (64, 8)])  # 8 GPUs and 512 GPUs
def test_all_equal_gpus_flag_nothing(nodes, per_node):
    results = GpuPerfCheck().compare(cluster(nodes, per_node), GpuPerfCheck().with_defaults(OPTS))
    assert bad(results) == [] and len(results) == nodes
    assert all(r.level is Level.PASS and f"{per_node} GPU(s) perform as expected" in r.summary for r in results)


@pytest.mark.parametrize("nodes,per_node,where", [(1, 8, ("node000", 5)), (64, 8, ("node041", 3))])
def test_one_slow_gpu_is_named_among_8_and_512(nodes, per_node, where):
    node, index = where
    results = GpuPerfCheck().compare(cluster(nodes, per_node, slow=(node, index, "gemm_tflops", 600.0)), GpuPerfCheck().with_defaults(OPTS))
    [r] = bad(results)
    assert r.level is Level.WARN and r.nodes == [node]  # 600/780 = 77%: under 0.9 x median, over 0.7 x
    assert r.summary.startswith(f"{node} GPU {index} (GPU-{index:04d}, 00000000:{index:02X}:00.0): bf16 GEMM 600 TFLOP/s")
    assert f"77% of the median of the job's {nodes * per_node} {H100} GPUs (780)" in r.summary
    assert "77% of the 783 TFLOP/s achievable on H100 SXM (measured)" in r.summary
    assert r.details["metric"] == "gemm_tflops" and r.details["uuid"] == f"GPU-{index:04d}"
    assert "nvidia-smi -q -d PERFORMANCE,POWER" in r.fix
    assert sum(1 for x in results if x.level is Level.PASS) == nodes - 1


def test_very_slow_gpu_fails_and_h2d_fix_points_at_pcie():
    results = GpuPerfCheck().compare(cluster(1, 8, slow=("node000", 2, "h2d_gbps", 13.0)), GpuPerfCheck().with_defaults(OPTS))
    [r] = bad(results)
    assert r.level is Level.FAIL and "pinned host->device 13 GB/s" in r.summary and "PCIe" in r.fix


def test_peer_thresholds_are_options():
    facts = cluster(1, 8, slow=("node000", 0, "copy_gbps", 2800.0))  # 94% of the median
    assert bad(GpuPerfCheck().compare(facts, GpuPerfCheck().with_defaults(OPTS))) == []
    [r] = bad(GpuPerfCheck().compare(facts, GpuPerfCheck().with_defaults({**OPTS, "peer_warn_ratio": 0.95})))
    assert r.level is Level.WARN and "device memory copy" in r.summary


def test_whole_node_below_the_sku_table_warns_even_when_peers_agree():
    facts = {"n1": {"gpus": [gpu(i, gemm_tflops=560.0) for i in range(8)]}}  # 72% of 783
    found = bad(GpuPerfCheck().compare(facts, GpuPerfCheck().with_defaults(OPTS)))
    assert len(found) == 8 and all(r.level is Level.WARN and "achievable on H100 SXM" in r.summary for r in found)
    assert all("median" not in r.summary for r in found)


def test_unknown_sku_is_judged_against_peers_only_and_models_are_not_mixed():
    facts = {"a": {"gpus": [gpu(i, name="NVIDIA Mystery X", gemm_tflops=10.0) for i in range(4)]},
             "b": {"gpus": [gpu(i) for i in range(4)]}}
    assert bad(GpuPerfCheck().compare(facts, GpuPerfCheck().with_defaults(OPTS))) == []


def test_measurement_error_fails_for_that_gpu():
    facts = {"n1": {"gpus": [gpu(0), {"index": 1, "error": "did not finish within 90 s"}]}}
    [r] = bad(GpuPerfCheck().compare(facts, GpuPerfCheck().with_defaults(OPTS)))
    assert r.level is Level.FAIL and "GPU 1" in r.summary and "did not finish" in r.summary
    assert "python -m ddpdoctor_checks.support.gpuperf --device 1" in r.fix


@pytest.mark.parametrize("name,label", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM (measured)"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4 "), ("NVIDIA A10", "A10 "),
])
def test_sku_table_matches_names(name, label):
    assert reference_for(name)[0].startswith(label)


def test_sku_table_h100_row_is_the_measured_baseline():
    assert reference_for("NVIDIA H100 80GB HBM3")[1] == {"gemm_tflops": 783, "copy_gbps": 2980, "h2d_gbps": 55}
    assert reference_for("NVIDIA GeForce RTX 4090") is None and reference_for(None) is None


def test_disabled_by_default():
    with pytest.raises(Skip, match="--perf"):
        GpuPerfCheck().gather(NodeContext(node="n1", opts=dict(OPTS)))


def test_enabled_without_cuda_skips():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(Skip, match="no CUDA device"):
        GpuPerfCheck().gather(NodeContext(node="n1", opts={**OPTS, "enabled": True}))


def test_parse_worker_output():
    line = json.dumps({"index": 0, "gemm_tflops": 1.0})
    assert gpuperf._parse_worker(0, 0, "noise\n" + line + "\n", "") == {"index": 0, "gemm_tflops": 1.0}
    assert gpuperf._parse_worker(3, 1, "", "Traceback\nRuntimeError: boom") == {
        "index": 3, "error": "worker exited 1: RuntimeError: boom"}


@pytest.mark.slow  # a fresh interpreter imports torch to measure
@pytest.mark.timeout(60)
def test_worker_process_reports_its_error_as_json():
    """A real worker process: on this CPU machine it fails to measure and says why, as one JSON line."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    [res] = gpuperf.measure_node([0], gpuperf.PerfConfig(gemm_n=64, copy_bytes=1 << 10, h2d_bytes=1 << 10, iters=2),
                                 timeout_s=50)
    assert res == {"index": 0, "error": f"RuntimeError: no CUDA device 0 (torch {torch.__version__} sees 0)"}


@pytest.mark.timeout(60)
def test_worker_past_its_timeout_is_killed(monkeypatch, tmp_path):
    slow = tmp_path / "slowpy"
    slow.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(60)'\n")
    slow.chmod(0o755)
    monkeypatch.setattr(gpuperf.sys, "executable", str(slow))
    import time

    t0 = time.monotonic()
    [res] = gpuperf.measure_node([0], gpuperf.PerfConfig(), timeout_s=1.0)
    assert res == {"index": 0, "error": "did not finish within 1 s"}
    assert time.monotonic() - t0 < 1 + 29  # its time limit (the worker sleeps 60 s); 29 s: starting and killing a process, loaded box
