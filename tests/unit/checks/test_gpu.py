"""The gpu check (visibility, counts, compute mode, MIG, busy GPUs, driver vs torch) against the fake NVML."""
from __future__ import annotations

import os
import sys

import pytest
from ddpdoctor_checks import gpu as gpu_mod
from ddpdoctor_checks.gpu import GpuCheck, resolve_visible

from ddpdoctor.api import Level, NodeContext
from tests.fakes import fake_nvml
from tests.fakes.fake_nvml import healthy_gpu
from tests.unit.helpers import levels

CUDA_TORCH = {"torch_version": "2.5.1+cu124", "torch_cuda_version": "12.4", "torch_device_count": 2, "torch_error": None}


@pytest.fixture
def env(monkeypatch):
    for var in ("CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def gather(monkeypatch, fake, run=None, torch=CUDA_TORCH):
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    if torch is not None:
        monkeypatch.setattr(gpu_mod, "torch_view", lambda: dict(torch))
    return GpuCheck().gather(NodeContext(node="n1", run=run or {}))


def judge(facts, **opts):
    return GpuCheck().compare({"n1": facts}, GpuCheck().with_defaults(opts))


def bad(results):
    return [r for r in results if r.level in (Level.WARN, Level.FAIL)]


def test_default_fake_facts_have_the_agreed_shape(env):
    fake = fake_nvml.make()
    f = gather(env, fake, run={"gpus_per_node": 2})
    assert f["driver_version"] == "550.54.15" and f["cuda_driver_version"] == "12.4"
    assert [g["index"] for g in f["gpus"]] == [0, 1]
    g1 = f["gpus"][1]
    assert g1["uuid"] == "GPU-00000001-aaaa-bbbb-cccc-000000000001" and g1["pci_bus_id"] == "00000000:28:00.0"
    assert g1["memory_total_bytes"] == 85_520_809_984
    assert g1["ecc_uncorrected_volatile"] == 2 and g1["remapped_rows"]["pending"] is True
    assert g1["pcie"] == {"gen": 3, "max_gen": 5, "width": 8, "max_width": 16}
    assert f["gpus"][0]["clock_reasons"] == ["gpu_idle"]
    assert f["cuda_visible_devices"]["resolved"] == [0, 1] and f["visible_count"] == 2
    assert f["torch_device_count"] == 2 and f["expected"]["gpus_per_node"] == 2
    assert fake.state.init_count == fake.state.shutdown_count == 1


def test_healthy_node_passes_and_hardware_faults_are_left_to_gpu_health(env):
    # The default fake has ECC errors and a slow PCIe link on GPU 1: the gpu check must not report them.
    results = judge(gather(env, fake_nvml.make(), run={"gpus_per_node": 2}), gpus_per_node=2)
    assert levels(results) == [Level.PASS]
    assert "2 of 2 GPU(s) visible" in results[0].summary and "driver 550.54.15" in results[0].summary


def test_too_few_gpus_for_gpus_per_node_fails(env):
    f = gather(env, fake_nvml.make(), run={"gpus_per_node": 4})
    [r] = bad(judge(f, gpus_per_node=4))
    assert r.level is Level.FAIL and r.actual == 2 and r.expected == 4 and "--gpus-per-node" in r.summary
    assert "--nproc-per-node=2" in r.fix


def test_local_world_size_is_the_expectation_under_a_launcher(env):
    env.setenv("LOCAL_WORLD_SIZE", "8")
    f = gather(env, fake_nvml.make())
    assert f["expected"]["local_world_size"] == 8
    [r] = bad(judge(f))
    assert r.level is Level.FAIL and "LOCAL_WORLD_SIZE" in r.summary and r.expected == 8


def test_torch_seeing_fewer_gpus_counts(env):
    f = gather(env, fake_nvml.make(), run={"gpus_per_node": 2}, torch=dict(CUDA_TORCH, torch_device_count=1))
    found = bad(judge(f, gpus_per_node=2))
    assert {r.level for r in found} == {Level.FAIL, Level.WARN}
    assert any("torch sees 1" in r.summary for r in found)


def test_cpu_torch_with_gpus_fails_when_gpus_are_expected(env):
    cpu = dict(CUDA_TORCH, torch_version="2.5.1+cpu", torch_cuda_version=None, torch_device_count=0)
    f = gather(env, fake_nvml.make(), torch=cpu)
    [r] = bad(judge(f, gpus_per_node=2))
    assert r.level is Level.FAIL and "CPU build" in r.summary and "download.pytorch.org" in r.fix
    [r] = bad(judge(f))
    assert r.level is Level.WARN


@pytest.mark.parametrize("cvd,resolved", [
    ("1", [1]),
    ("1,0", [1, 0]),
    ("GPU-00000001-aaaa", [1]),  # a unique UUID prefix is enough for CUDA
    ("GPU-00000000-aaaa-bbbb-cccc-000000000000,1", [0, 1]),
    ("", []),
])
def test_cuda_visible_devices_forms(env, cvd, resolved):
    env.setenv("CUDA_VISIBLE_DEVICES", cvd)
    f = gather(env, fake_nvml.make())
    assert f["cuda_visible_devices"]["resolved"] == resolved and f["visible_count"] == len(resolved)


def test_invalid_cuda_visible_devices_entry_fails_and_names_what_cuda_ignores(env):
    env.setenv("CUDA_VISIBLE_DEVICES", "0,7,1")
    f = gather(env, fake_nvml.make(), torch=dict(CUDA_TORCH, torch_device_count=1))
    assert f["cuda_visible_devices"]["invalid"] == "7" and f["cuda_visible_devices"]["ignored"] == ["1"]
    found = bad(judge(f))
    assert any(r.level is Level.FAIL and "'7' matches no GPU" in r.summary and "(1)" in r.summary for r in found)


def test_ambiguous_uuid_prefix_is_invalid():
    gpus = [{"index": 0, "uuid": "GPU-abc1"}, {"index": 1, "uuid": "GPU-abc2"}]
    assert resolve_visible("GPU-abc", gpus)["invalid"] == "GPU-abc"
    assert resolve_visible("GPU-abc2", gpus)["resolved"] == [1]


def test_duplicate_gpu_in_cuda_visible_devices_fails(env):
    env.setenv("CUDA_VISIBLE_DEVICES", "0,GPU-00000000")
    f = gather(env, fake_nvml.make(), torch=dict(CUDA_TORCH, torch_device_count=1))
    assert any(r.level is Level.FAIL and "same GPU twice" in r.summary for r in judge(f))


def test_mig_ids_resolve_to_their_gpu_and_mig_warns(env):
    mig = "MIG-11111111-2222-3333-4444-555555555555"
    fake = fake_nvml.make([healthy_gpu(0, mig_mode=(1, 1), mig_devices=[mig])])
    env.setenv("CUDA_VISIBLE_DEVICES", mig)
    f = gather(env, fake, torch=dict(CUDA_TORCH, torch_device_count=1))
    assert f["cuda_visible_devices"]["resolved"] == [0] and f["cuda_visible_devices"]["mig"] == [mig]
    assert f["gpus"][0]["mig_devices"] == [mig]
    [r] = bad(judge(f))
    assert r.level is Level.WARN and "MIG enabled" in r.summary and "-mig 0" in r.fix
    env.setenv("CUDA_VISIBLE_DEVICES", "MIG-GPU-00000000-aaaa-bbbb-cccc-000000000000/1/0")  # legacy form
    assert gather(env, fake)["cuda_visible_devices"]["resolved"] == [0]


def test_local_rank_beyond_visible_gpus_fails(env):
    env.setenv("CUDA_VISIBLE_DEVICES", "1")
    env.setenv("LOCAL_RANK", "1")
    f = gather(env, fake_nvml.make(), torch=dict(CUDA_TORCH, torch_device_count=1))
    found = bad(judge(f))
    assert any(r.level is Level.FAIL and "LOCAL_RANK=1" in r.summary and "set_device(0)" in r.fix for r in found)


@pytest.mark.parametrize("mode,procs,level", [(3, [], Level.WARN), (3, [(999999, 1 << 30)], Level.FAIL), (2, [], Level.FAIL)])
def test_compute_mode(env, mode, procs, level):
    fake = fake_nvml.make([healthy_gpu(0, compute_mode=mode, processes=procs)])
    f = gather(env, fake, torch=dict(CUDA_TORCH, torch_device_count=1))
    found = [r for r in bad(judge(f)) if "compute mode" in r.summary]
    assert [r.level for r in found] == [level]
    r = found[0]
    assert "GPU 0 (GPU-00000000-aaaa-bbbb-cccc-000000000000, 00000000:18:00.0)" in r.summary
    assert "-c DEFAULT" in r.fix and r.details["uuid"].startswith("GPU-0000")


def test_foreign_process_warns_but_our_own_does_not(env):
    fake = fake_nvml.make([healthy_gpu(0, processes=[(os.getpid(), 1 << 30)]),
                           healthy_gpu(1, processes=[(999999, 3 << 30)])])
    found = bad(judge(gather(env, fake)))
    assert len(found) == 1
    r = found[0]
    assert r.level is Level.WARN and "GPU 1" in r.summary and "pid 999999" in r.summary and "3.0 GiB" in r.summary
    assert r.fix.startswith("kill 999999")
    assert judge(gather(env, fake), allow_foreign_processes=True)[0].level is Level.PASS


def test_old_driver_for_torch_cuda(env):
    f = gather(env, fake_nvml.make(cuda_driver_version=11080))
    [r] = bad(judge(f))
    assert r.level is Level.FAIL and "CUDA 11.8" in r.summary and "insufficient" in r.summary
    f = gather(env, fake_nvml.make(cuda_driver_version=12020))
    [r] = bad(judge(f))
    assert r.level is Level.WARN and "minor-version" in r.summary


def test_not_supported_fields_become_none_not_errors(env):
    fake = fake_nvml.make([healthy_gpu(0, ecc_mode=None, unsupported={"nvmlDeviceGetComputeRunningProcesses",
                                                                      "nvmlDeviceGetCurrPcieLinkWidth"})])
    g = gather(env, fake, torch=dict(CUDA_TORCH, torch_device_count=1))["gpus"][0]
    assert g["ecc_enabled"] is None and g["ecc_uncorrected_volatile"] is None and g["processes"] is None
    assert g["pcie"]["width"] is None and g["pcie"]["gen"] == 5
    assert {"ecc_mode", "processes", "pcie_width"} <= set(g["unsupported"]) and "errors" not in g


def test_lost_gpu_fails(env):
    fake = fake_nvml.make([healthy_gpu(0), healthy_gpu(1, lost=True)])
    f = gather(env, fake, torch=dict(CUDA_TORCH, torch_device_count=1))
    assert f["gpus"][1]["lost"] is True and f["visible_count"] == 1
    found = bad(judge(f, gpus_per_node=2))
    assert any("GPU 1 does not answer NVML: GPU is lost" in r.summary and "nvidia-smi -r -i 1" in r.fix for r in found)
    assert any("1 usable GPU(s) but the job needs 2" in r.summary for r in found)


def test_no_driver_is_a_skip_unless_gpus_are_expected(env):
    f = gather(env, fake_nvml.make_no_driver())
    assert f["no_driver"] is True and f["gpus"] == [] and "Library Not Found" in f["nvml_error"]
    [r] = judge(f)
    assert r.level is Level.SKIP and "no NVIDIA driver on n1" in r.summary
    [r] = judge(f, gpus_per_node=8)
    assert r.level is Level.FAIL and "8 GPU(s) expected" in r.summary and "driver" in r.fix


def test_driver_library_mismatch_fails_with_reboot_fix(env):
    f = gather(env, fake_nvml.make_no_driver(fake_nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert f["no_driver"] is False
    [r] = judge(f)
    assert r.level is Level.FAIL and "reboot" in r.fix


def test_missing_pynvml_reads_as_no_driver(env):
    env.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    env.setattr(gpu_mod, "torch_view", lambda: dict(CUDA_TORCH, torch_device_count=0))
    f = GpuCheck().gather(NodeContext(node="n1"))
    assert f["no_driver"] is True and "cannot be imported" in f["nvml_error"]


def test_real_torch_view_never_raises():
    view = gpu_mod.torch_view()
    assert set(view) == {"torch_version", "torch_cuda_version", "torch_device_count", "torch_error"}
    assert view["torch_error"] is None and isinstance(view["torch_device_count"], int)


def test_real_pynvml_without_a_driver_is_recognised(env):
    """The real nvidia-ml-py on a machine without the NVIDIA driver: its error class and code read as no driver."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    env.setattr(gpu_mod, "torch_view", lambda: dict(CUDA_TORCH, torch_device_count=0))
    f = GpuCheck().gather(NodeContext(node="n1"))
    assert f["no_driver"] is True and f["nvml_error_code"] in (9, 12) and f["gpus"] == []
    assert judge(f)[0].level is Level.SKIP


# ---- issue 20: heterogeneous nodes ------------------------------------------------------------------------
def test_each_node_needs_a_gpu_per_own_process_and_its_count_then_leaves_the_parity_diff(env):
    four = gather(env, fake_nvml.make([healthy_gpu(i) for i in range(4)]), run={"nproc_per_node": 4},
                  torch=dict(CUDA_TORCH, torch_device_count=4))
    two = gather(env, fake_nvml.make([healthy_gpu(i) for i in range(2)]), run={"nproc_per_node": 2})
    assert four["expected"]["nproc_per_node"] == 4
    # the master's compare: its own run settings (nproc 4) must not be held against the node with 2
    results = GpuCheck().compare({"a": four, "b": two}, GpuCheck().with_defaults({"nproc_per_node": 4}))
    assert levels(results) == [Level.PASS, Level.PASS], [r.summary for r in results]
    assert "count" not in GpuCheck().comparable(four) and "count" not in GpuCheck().comparable(two)
    assert GpuCheck().comparable(four)["models"] == GpuCheck().comparable(two)["models"]
    unknown = gather(env, fake_nvml.make([healthy_gpu(0), healthy_gpu(1)]))
    assert GpuCheck().comparable(unknown)["count"] == 2  # nothing says how many it needs: counts must agree


def test_more_processes_than_gpus_on_a_node_fails_there_and_a_cpu_node_may_start_processes(env):
    three = gather(env, fake_nvml.make([healthy_gpu(0), healthy_gpu(1)]), run={"nproc_per_node": 3})
    (fail,) = bad(GpuCheck().compare({"b": three}, GpuCheck().with_defaults({})))
    assert fail.level is Level.FAIL and fail.nodes == ["b"] and fail.expected == 3 and fail.actual == 2
    assert "--nproc-per-node 3" in fail.summary and "--nproc-per-node=2 on b" in fail.fix
    cpu = gather(env, fake_nvml.make_no_driver(), run={"nproc_per_node": 4}, torch=None)
    (skip,) = GpuCheck().compare({"c": cpu}, GpuCheck().with_defaults({}))
    assert skip.level is Level.SKIP  # gloo on a CPU node: processes without GPUs are legal
    gpus_flag = gather(env, fake_nvml.make([healthy_gpu(0)]), run={"nproc_per_node": 1},
                       torch=dict(CUDA_TORCH, torch_device_count=1))
    (wanted,) = bad(GpuCheck().compare({"d": gpus_flag}, GpuCheck().with_defaults({"gpus_per_node": 2})))
    assert "--gpus-per-node" in wanted.summary  # --gpus-per-node holds for every node


def test_a_cpu_node_under_torchrun_is_no_missing_gpu(env):
    # torchrun sets LOCAL_WORLD_SIZE on a CPU node too (gloo): like --nproc-per-node, a process count asks for
    # GPUs only where there is a driver; `torchrun ... -m ddpdoctor preflight` on CPU nodes once failed here
    env.setenv("LOCAL_WORLD_SIZE", "2")
    f = gather(env, fake_nvml.make_no_driver())
    [r] = judge(f)
    assert r.level is Level.SKIP and "no NVIDIA driver" in r.summary
    [r] = judge(f, gpus_per_node=2)
    assert r.level is Level.FAIL and "2 GPU(s) expected" in r.summary


def test_under_torchrun_a_node_without_a_driver_beside_gpu_nodes_fails(env):
    """LOCAL_WORLD_SIZE on a node without a driver is a CPU node only when no node of the run has GPUs: beside
    GPU nodes it is a GPU node whose driver failed to load (after a kernel update), and it fails (review)."""
    env.setenv("LOCAL_WORLD_SIZE", "2")
    broken = gather(env, fake_nvml.make_no_driver())
    healthy = gather(env, fake_nvml.make())
    results = GpuCheck().compare({"gpu1": healthy, "gpu2": broken}, GpuCheck().with_defaults({}))
    [r] = [r for r in results if r.nodes == ["gpu2"]]
    assert r.level is Level.FAIL and "2 GPU(s) expected" in r.summary
    # a run of CPU nodes only: still a skip on each
    results = GpuCheck().compare({"cpu1": broken, "cpu2": broken}, GpuCheck().with_defaults({}))
    assert {r.level for r in results} == {Level.SKIP}
