"""`ddpdoctor preflight --only gpu,gpu-health --json` in-process, with the fake NVML standing in for the driver."""
from __future__ import annotations

import json
import sys

import pytest
from ddpdoctor_checks import gpu as gpu_mod
from ddpdoctor_checks import gpu_health

from ddpdoctor import cli
from tests.fakes import fake_nvml

CUDA_TORCH = {"torch_version": "2.5.1+cu124", "torch_cuda_version": "12.4", "torch_device_count": 2, "torch_error": None}


@pytest.fixture
def fake(monkeypatch):
    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    mod = fake_nvml.make()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monkeypatch.setattr(gpu_mod, "torch_view", lambda: dict(CUDA_TORCH))
    # No Xid in the kernel log: keeps the run independent of this machine's dmesg.
    monkeypatch.setattr(gpu_health, "read_kernel_log",
                        lambda: {"readable": True, "source": "dmesg", "text": "", "error": None})
    return mod


def run_json(capsys, *args):
    code = cli.run(["preflight", "--only", "gpu,gpu-health", "--json", "--set", "gpu-health.xid_wait_ms=50", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.timeout(60)
def test_preflight_fails_naming_node_gpu_uuid_and_bus(fake, capsys):
    code, doc = run_json(capsys, "--gpus-per-node", "2")
    assert code == 1 and doc["kind"] == "preflight" and doc["verdict"] == "fail" and doc["exit_code"] == 1
    [node] = doc["nodes"]
    gpu_facts = doc["nodes"][node]["facts"]["gpu"]
    assert [g["uuid"] for g in gpu_facts["gpus"]] == ["GPU-00000000-aaaa-bbbb-cccc-000000000000",
                                                      "GPU-00000001-aaaa-bbbb-cccc-000000000001"]
    assert gpu_facts["driver_version"] == "550.54.15" and gpu_facts["torch_device_count"] == 2
    fails = [r for r in doc["results"] if r["level"] == "fail"]
    assert {r["check"] for r in fails} == {"gpu-health"}
    ecc = next(r for r in fails if "uncorrected ECC" in r["summary"])
    assert ecc["nodes"] == [node]
    assert ecc["summary"].startswith(f"{node} GPU 1 (GPU-00000001-aaaa-bbbb-cccc-000000000001, 00000000:28:00.0)")
    assert ecc["details"]["pci_bus_id"] == "00000000:28:00.0" and "nvidia-smi -r -i 1" in ecc["fix"]
    assert any(r["check"] == "gpu" and r["level"] == "pass" for r in doc["results"])
    assert fake.state.init_count == fake.state.shutdown_count == 2  # one session per check, all closed


@pytest.mark.timeout(60)
def test_preflight_without_a_driver_skips_or_fails_on_expected_gpus(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml.make_no_driver())
    code, doc = run_json(capsys)
    assert code == 0 and {r["level"] for r in doc["results"]} == {"skip"}
    assert any("no NVIDIA driver" in r["summary"] for r in doc["results"] if r["check"] == "gpu")
    code, doc = run_json(capsys, "--gpus-per-node", "8")
    assert code == 1
    [fail] = [r for r in doc["results"] if r["level"] == "fail"]
    assert fail["check"] == "gpu" and "8 GPU(s) expected" in fail["summary"]
