"""gpu-health: each hardware rule against the fake NVML, Xid from NVML events and from kernel-log text."""
from __future__ import annotations

import sys

import pytest
from ddpdoctor_checks import gpu as gpu_mod
from ddpdoctor_checks import gpu_health as gh
from ddpdoctor_checks.gpu import GpuCheck
from ddpdoctor_checks.gpu_health import GpuHealthCheck, bus_key, parse_kernel_xids
from ddpdoctor_checks.support.nvml import nvml_session, snapshot

from ddpdoctor.api import Level, NodeContext, Skip
from tests.fakes import fake_nvml
from tests.fakes.fake_nvml import healthy_gpu

NO_LOG = {"readable": False, "source": None, "text": "", "error": "dmesg: read kernel buffer failed: Operation not permitted"}


def gather(monkeypatch, fake, log=None, **opts):
    """gpu-health's facts on the fake, with the gpu check's facts beside them under "uses" (as the runner hands
    them to compare). The gpu check reads a twin of the fake, so the fake counts gpu-health's NVML calls only."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(gh, "read_kernel_log", lambda: dict(log or {"readable": True, "source": "dmesg", "text": "",
                                                                     "error": None}))
    monkeypatch.setattr(gh, "_uptime", lambda: 10_000.0)
    check = GpuHealthCheck()
    facts = check.gather(NodeContext(node="n1", opts=check.with_defaults({"xid_wait_ms": 50, **opts})))
    state = fake.state
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pynvml", fake_nvml.make(state.gpus, state.driver_version, state.cuda_driver_version))
        m.setattr(gpu_mod, "torch_view", lambda: {"torch_version": "2.5.1+cu124", "torch_cuda_version": "12.4",
                                                  "torch_device_count": len(state.gpus), "torch_error": None})
        facts["uses"] = {"gpu": GpuCheck().gather(NodeContext(node="n1"))}
    return facts


def judge(facts, node="n1", **opts):
    return GpuHealthCheck().compare({node: facts}, GpuHealthCheck().with_defaults(opts))


def bad(results):
    return [r for r in results if r.level in (Level.WARN, Level.FAIL, Level.SKIP)]


def one(monkeypatch, **gpu):
    """Judge a single GPU with these fake fields; returns the non-pass results."""
    return bad(judge(gather(monkeypatch, fake_nvml.make([healthy_gpu(0, **gpu)]))))


def test_default_scenario_fails_gpu1_naming_node_index_uuid_bus(monkeypatch):
    fake = fake_nvml.make()
    results = judge(gather(monkeypatch, fake))
    found = bad(results)
    assert [r.level for r in found] == [Level.FAIL, Level.FAIL, Level.WARN]
    for r in found:
        assert r.nodes == ["n1"]
        assert r.summary.startswith("n1 GPU 1 (GPU-00000001-aaaa-bbbb-cccc-000000000001, 00000000:28:00.0)")
        assert r.details.items() >= {"gpu": 1, "uuid": "GPU-00000001-aaaa-bbbb-cccc-000000000001",
                                     "pci_bus_id": "00000000:28:00.0", "name": "NVIDIA H100 80GB HBM3"}.items()
        assert r.fix
    assert "2 uncorrected ECC" in found[0].summary and "nvidia-smi -r -i 1" in found[0].fix
    assert "row remap is pending" in found[1].summary
    assert "x8, below its x16" in found[2].summary and found[2].actual == "gen3 x8"
    assert fake.state.init_count == fake.state.shutdown_count == 1
    assert all(es["freed"] for es in fake.state.event_sets.values())


def test_healthy_gpu_passes_and_h100_not_supported_fields_are_fine(monkeypatch):
    f = gather(monkeypatch, fake_nvml.make([healthy_gpu(0), healthy_gpu(1)]))
    g = f["gpus"][0]
    assert g["retired_pages"] is None and g["nvlink"] is None  # NotSupported on an H100, as measured
    assert "retired_pages_sbe" in g["unsupported"] and g["power_limit_w"] == 700.0 and g["persistence_mode"] is True
    [r] = judge(f)
    assert r.level is Level.PASS and "2 GPU(s) healthy" in r.summary


def test_aggregate_only_ecc_warns(monkeypatch):
    [r] = one(monkeypatch, ecc_uncorrected_aggregate=4)
    assert r.level is Level.WARN and "4 uncorrected ECC error(s) in its lifetime" in r.summary


def test_ecc_disabled_and_pending_change(monkeypatch):
    [r] = one(monkeypatch, ecc_mode=(0, 0))
    assert r.level is Level.WARN and "ECC is disabled" in r.summary and "-e 1" in r.fix
    [r] = one(monkeypatch, ecc_mode=(1, 0))
    assert r.level is Level.WARN and "pending until the next reboot" in r.summary


def test_row_remap_failure_fails_with_replace(monkeypatch):
    [r] = one(monkeypatch, remapped_rows=(0, 8, 0, 1))
    assert r.level is Level.FAIL and "row remap failed" in r.summary and "RMA" in r.fix


def test_retired_pages_pending_and_too_many(monkeypatch):
    found = one(monkeypatch, unsupported=set(), nvlink=None, retired_pages={0: list(range(50)), 1: list(range(12))},
                retired_pending=1)
    assert [r.level for r in found] == [Level.FAIL, Level.FAIL]
    assert "page retirement is pending" in found[0].summary and "62 retired pages (12 from double-bit" in found[1].summary
    assert one(monkeypatch, unsupported=set(), retired_pages={0: [1, 2], 1: []}, retired_pending=0) == []


@pytest.mark.parametrize("reasons,expect", [
    (fake_nvml.HW_SLOWDOWN, "hw_slowdown"),
    (fake_nvml.HW_THERMAL | fake_nvml.SW_THERMAL, "hw_thermal_slowdown, sw_thermal_slowdown"),
])
def test_clock_slowdowns_warn(monkeypatch, reasons, expect):
    [r] = one(monkeypatch, clock_reasons=reasons)
    assert r.level is Level.WARN and expect in r.summary


def test_sw_power_cap_alone_is_normal(monkeypatch):
    assert one(monkeypatch, clock_reasons=0x4) == []


def test_throttle_reasons_fallback_for_older_bindings(monkeypatch):
    fake = fake_nvml.make([healthy_gpu(0, clock_reasons=fake_nvml.HW_SLOWDOWN)])
    del fake.nvmlDeviceGetCurrentClocksEventReasons
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with nvml_session() as nv:  # the snapshot gpu-health judges is the gpu check's (support/nvml.py)
        g = snapshot(nv, 0)
    assert g["clock_reasons"] == ["hw_slowdown"]


def test_pcie_gen_below_max_only_matters_when_busy(monkeypatch):
    assert one(monkeypatch, pcie=(1, 5, 16, 16), clock_reasons=fake_nvml.IDLE) == []
    [r] = one(monkeypatch, pcie=(4, 5, 16, 16), clock_reasons=0)
    assert r.level is Level.WARN and "gen4 while busy" in r.summary and "reseat" in r.fix


def test_temperature_power_cap_persistence(monkeypatch):
    [r] = one(monkeypatch, temperature=84, slowdown_temp=87)  # within 5 C of the slowdown threshold
    assert r.level is Level.WARN and "temperature 84 C" in r.summary
    assert one(monkeypatch, temperature=70) == []
    [r] = one(monkeypatch, power_limit_mw=400_000, power_enforced_mw=400_000)
    assert "power limit 400 W is below the default 700 W" in r.summary and "-pl 700" in r.fix
    [r] = one(monkeypatch, persistence=0)
    assert "persistence mode is off" in r.summary and "-pm 1" in r.fix
    assert bad(judge(gather(monkeypatch, fake_nvml.make([healthy_gpu(0, persistence=0)])),
                     require_persistence=False)) == []


def test_nvlink_partial_and_all_down(monkeypatch):
    [r] = one(monkeypatch, unsupported=set(), nvlink=[1, 1, 0, 1])
    assert r.level is Level.WARN and "NVLink link(s) [2] down, 3 up" in r.summary
    fake = fake_nvml.make([healthy_gpu(0, unsupported=set(), nvlink=[1, 1]), healthy_gpu(1, unsupported=set(), nvlink=[0, 0])])
    [r] = bad(judge(gather(monkeypatch, fake)))
    assert "GPU 1" in r.summary and "all 2 NVLink links are down while GPU(s) [0]" in r.summary


def test_xid_event_during_the_check_fails(monkeypatch):
    fake = fake_nvml.make([healthy_gpu(0), healthy_gpu(1, xid_events=[79])])
    f = gather(monkeypatch, fake)
    assert f["xid_watch"]["events"] == [{"gpu": 1, "uuid": "GPU-00000001-aaaa-bbbb-cccc-000000000001", "xid": 79,
                                         "meaning": "GPU has fallen off the bus", "kind": "hw"}]
    [r] = bad(judge(f))
    assert r.level is Level.FAIL and "GPU 1" in r.summary and "Xid 79" in r.summary and "reboot" in r.fix


def test_xid_wait_zero_skips_registration(monkeypatch):
    fake = fake_nvml.make([healthy_gpu(0, xid_events=[48])])
    f = gather(monkeypatch, fake, xid_wait_ms=0)
    assert f["xid_watch"]["events"] == [] and fake.state.event_sets == {}


def test_gpu_without_event_support_is_listed_unwatched(monkeypatch):
    fake = fake_nvml.make([healthy_gpu(0, unsupported={"nvmlDeviceRegisterEvents"})])
    assert gather(monkeypatch, fake)["xid_watch"]["unwatched"] == [0]


DMESG = """\
[    5.123456] nvidia: loading out-of-tree module taints kernel.
[ 9000.000001] NVRM: Xid (PCI:0000:28:00): 79, pid=1234, name=python, GPU has fallen off the bus.
[ 9100.500000] NVRM: Xid (PCI:0000:28:00): 79, pid=1234, name=python, GPU has fallen off the bus.
[ 9200.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=42, name=python, Graphics SM Warp Exception
[  100.000000] NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error
"""
JOURNAL = "[ 9950.123456] gpu-host kernel: NVRM: Xid (PCI:0000:18:00): 94, pid=77, name=python, Contained: SM (0x1)."


def test_parse_kernel_xids_dmesg_and_journal_formats():
    xs = parse_kernel_xids(DMESG, uptime_s=10_000.0)
    assert [(x["pci"], x["xid"], x["kind"]) for x in xs] == [
        ("0000:28:00", 79, "hw"), ("0000:28:00", 79, "hw"), ("0000:18:00", 13, "app"), ("0000:18:00", 48, "hw")]
    assert xs[0]["age_s"] == pytest.approx(1000.0, abs=0.1)
    [j] = parse_kernel_xids(JOURNAL, uptime_s=None)
    assert j["xid"] == 94 and j["age_s"] is None and j["meaning"] == "contained ECC error"
    assert parse_kernel_xids("no xid here\n[1.0] NVRM: loading", 5.0) == []
    flood = "".join(f"[{i}.0] NVRM: Xid (PCI:0000:28:00): 79, pid={i}\n" for i in range(1, 1001))
    xs = parse_kernel_xids(flood, 2000.0)
    assert len(xs) == 200 and xs[-1]["line"].endswith("pid=1000")


def test_bus_key_matches_nvml_and_kernel_spellings():
    assert bus_key("00000000:28:00.0") == bus_key("0000:28:00") == bus_key("28:00.0") == (0, 0x28, 0)
    assert bus_key(None) is None and bus_key("garbage") is None


def test_kernel_log_xids_map_to_gpus_recent_fail_old_warn_app_ignored(monkeypatch):
    log = {"readable": True, "source": "dmesg", "text": DMESG, "error": None}
    f = gather(monkeypatch, fake_nvml.make([healthy_gpu(0), healthy_gpu(1)]), log=log)
    found = bad(judge(f, xid_recent_s=3600))
    assert len(found) == 2  # Xid 13 is the application's; the two 79s fold into one finding
    old, recent = found  # sorted by PCI bus: GPU 0 (0x18) first
    assert old.level is Level.WARN and "GPU 0" in old.summary and "Xid 48" in old.summary and "2.8 h ago" in old.summary  # 9900 s
    assert recent.level is Level.FAIL and "GPU 1 (GPU-00000001" in recent.summary and "00000000:28:00.0" in recent.summary
    assert "Xid 79 (GPU has fallen off the bus) x2, last 15 min ago" in recent.summary
    assert recent.details["xid"] == 79 and "reboot" in recent.fix


def test_unreadable_kernel_log_is_a_skip_result_with_the_way_to_read_it(monkeypatch):
    f = gather(monkeypatch, fake_nvml.make([healthy_gpu(0)]), log=NO_LOG)
    results = judge(f)
    [s] = [r for r in results if r.level is Level.SKIP]
    assert "Operation not permitted" in s.summary and "CAP_SYSLOG" in s.fix
    assert any(r.level is Level.PASS for r in results)


def test_kernel_log_option_off(monkeypatch):
    f = gather(monkeypatch, fake_nvml.make([healthy_gpu(0)]), log=NO_LOG, kernel_log=False)
    assert "kernel_log" not in f and [r.level for r in judge(f)] == [Level.PASS]


def test_read_kernel_log_degrades_without_binaries(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    out = gh.read_kernel_log(timeout_s=2)
    assert out["readable"] is False and "dmesg" in out["error"] and "journalctl" in out["error"]


def test_no_driver_is_a_skip(monkeypatch):
    with pytest.raises(Skip, match="no usable NVIDIA driver"):
        gather(monkeypatch, fake_nvml.make_no_driver())


def test_lost_gpu_is_left_to_the_gpu_check(monkeypatch):
    f = gather(monkeypatch, fake_nvml.make([healthy_gpu(0), healthy_gpu(1, lost=True)]))
    assert f["gpus"][1]["lost"] is True
    [r] = judge(f)
    assert r.level is Level.PASS and "1 GPU(s) healthy" in r.summary


def test_compare_over_many_nodes_names_each_node():
    ok = {"gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0", "ecc_uncorrected_volatile": 0}]}
    sick = {"gpus": [{"index": 3, "uuid": "GPU-b", "pci_bus_id": "00000000:9A:00.0", "ecc_uncorrected_volatile": 1}]}
    results = GpuHealthCheck().compare({"a": ok, "b": sick, "c": ok}, GpuHealthCheck().with_defaults({}))
    [f] = [r for r in results if r.level is Level.FAIL]
    assert f.nodes == ["b"] and f.summary.startswith("b GPU 3 (GPU-b, 00000000:9A:00.0)")
    assert sorted(r.nodes[0] for r in results if r.level is Level.PASS) == ["a", "c"]
