"""gpu-health: hardware faults of each GPU on this node (issue #7 item 1; failure catalog E4, E6).

Judged per GPU, each finding naming node, GPU index, UUID and PCI bus id, with the fix: volatile and
aggregate uncorrected ECC errors, pending/failed row remaps, retired pages (where the GPU retires pages,
pre-Ampere), Xid events (NVML event set during a short wait, plus `NVRM: Xid` lines in the kernel log when
readable), clock slowdowns (HW/thermal/power brake), PCIe link below its max generation or width,
temperature, power cap below default, persistence mode off, NVLink links down.

The per-GPU snapshot (ECC counters, row remaps, clocks, PCIe link, temperature) is the gpu check's: this
check declares ``uses = ("gpu",)`` and reads it in compare; its own gather reads only what the snapshot
lacks (support/nvml.py ``health_fields``), the NVML Xid events and the kernel log (support/kernel_log.py).

Not here (gpu owns them): driver presence, GPU counts and visibility, compute mode, MIG, busy GPUs, lost
GPUs; model/count differences across nodes are the parity check's. A node without the driver is a Skip.
"""
from __future__ import annotations

from shlex import quote
from typing import Any, Iterable

from ddpdoctor.api import Check, Option, Skip, passed_if_quiet, per_node

from .support.kernel_log import bus_key, parse_kernel_xids, read_kernel_log
from .support.kernel_log import uptime as _uptime
from .support.nvml import NvmlUnavailable, gpu_details, gpu_label, nvml_session
from .support.nvml_health import health_fields, watch_xids

HW_SLOW = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
__all__ = ["GpuHealthCheck", "bus_key", "parse_kernel_xids", "read_kernel_log"]


def with_snapshots(f: dict) -> list[dict]:
    """This check's GPUs, each merged over the gpu check's snapshot of the same GPU (by UUID, else index)."""
    snaps = [g for g in (((f.get("uses") or {}).get("gpu") or {}).get("gpus") or []) if isinstance(g, dict)]
    by_uuid = {g.get("uuid"): g for g in snaps if g.get("uuid")}
    by_index = {g.get("index"): g for g in snaps}
    return [{**(by_uuid.get(g.get("uuid")) or by_index.get(g.get("index")) or {}), **g}
            for g in f.get("gpus") or [] if isinstance(g, dict)]


class GpuHealthCheck(Check):
    name = "gpu-health"
    description = "Per-GPU hardware faults: ECC, row remaps, retired pages, Xid, clock slowdowns, PCIe link, temperature, power, NVLink"
    phase = "local"
    uses = ("gpu",)  # the per-GPU snapshot: ECC counters, row remaps, clocks, PCIe link, temperature
    timeout_s = 60.0
    options = {
        "xid_wait_ms": Option(500, "how long to listen for NVML Xid events during the check (0: don't)"),
        "kernel_log": Option(True, "scan the kernel log (dmesg / journalctl -k) for NVRM Xid lines"),
        "xid_recent_s": Option(86400.0, "a hardware Xid in the kernel log younger than this fails, older warns"),
        "retired_pages_max": Option(60, "this many retired pages on one GPU fails (NVIDIA's RMA guidance is about 60)"),
        "temp_warn_c": Option(85.0, "GPU temperature from which to warn (also: within 5 C of its slowdown threshold)"),
        "power_cap_ratio": Option(0.9, "a power limit below this fraction of the default limit warns"),
        "require_persistence": Option(True, "persistence mode off is a warning"),
    }

    def gather(self, ctx) -> dict:
        opts = ctx.opts
        try:
            with nvml_session() as nv:
                gpus = [health_fields(nv, i) for i in range(nv.nvmlDeviceGetCount())]
                xid = watch_xids(nv, [g for g in gpus if not g.get("lost")], int(opts["xid_wait_ms"]))
        except NvmlUnavailable as exc:
            raise Skip(f"no usable NVIDIA driver ({exc}); the gpu check reports it") from None
        facts: dict[str, Any] = {"gpus": gpus, "xid_watch": xid}
        if opts["kernel_log"]:
            log = read_kernel_log()
            facts["kernel_log"] = {"readable": log["readable"], "source": log["source"], "error": log["error"],
                                   "xids": parse_kernel_xids(log["text"], _uptime()) if log["readable"] else []}
        return facts

    def compare(self, facts_by_node, opts):
        return per_node(facts_by_node, lambda node, f: list(self._judge(node, f, opts)))

    # ---- judgement ---------------------------------------------------------------------------------------
    def _judge(self, node: str, f: dict, opts) -> Iterable:
        gpus = [g for g in with_snapshots(f) if not g.get("lost")]  # lost GPUs: the gpu check's finding
        found = []
        for g in gpus:
            found += self._memory(node, g, opts)
            found += self._clocks_and_link(node, g, opts)
            found += self._power_and_links(node, g, gpus, opts)
        found += self._xids(node, f, gpus, opts)
        yield from passed_if_quiet(found, self, [node], f"{node}: {len(gpus)} GPU(s) healthy (ECC, row remaps, Xid, "
                                   "clocks, PCIe link, temperature, power)", actual=len(gpus))

    def _mk(self, level, node, g, what, fix, actual=None, expected=None, **details):
        make = {"fail": self.fail, "warn": self.warn, "skip": self.skip}[level]
        return make(f"{gpu_label(node, g)}: {what}", [node], actual=actual, expected=expected, fix=fix,
                    details={**gpu_details(g), **details})

    def _memory(self, node, g, opts):
        i = g["index"]
        out = []
        reset = f"drain {node}, then reset the GPU: sudo nvidia-smi -r -i {i} (or reboot); replace it if this returns"
        if g.get("ecc_enabled") is False:
            out.append(self._mk("warn", node, g, "ECC is disabled: memory errors go undetected",
                                f"sudo nvidia-smi -i {i} -e 1 && sudo reboot", actual="off", expected="on"))
        elif g.get("ecc_pending_enabled") is not None and g.get("ecc_pending_enabled") != g.get("ecc_enabled"):
            out.append(self._mk("warn", node, g, "an ECC mode change is pending until the next reboot",
                                "reboot the node", actual=g.get("ecc_enabled"), expected=g.get("ecc_pending_enabled")))
        vol, agg = g.get("ecc_uncorrected_volatile"), g.get("ecc_uncorrected_aggregate")
        if vol:
            out.append(self._mk("fail", node, g, f"{vol} uncorrected ECC error(s) since the last driver load",
                                reset, actual=vol, expected=0))
        elif agg:
            out.append(self._mk("warn", node, g, f"{agg} uncorrected ECC error(s) in its lifetime (none since the "
                                "driver loaded)", f"watch it: nvidia-smi -q -d ECC,ROW_REMAPPER -i {i}; drain it if "
                                "the count grows", actual=agg, expected=0))
        rows = g.get("remapped_rows") or {}
        if rows.get("failure"):
            out.append(self._mk("fail", node, g, "a row remap failed: the GPU has run out of spare rows",
                                f"drain {node} and replace GPU {i} (RMA)", actual="remap failure", expected="none"))
        elif rows.get("pending"):
            out.append(self._mk("fail", node, g, "a row remap is pending: it takes effect only after a GPU reset",
                                reset, actual="pending", expected="none", uncorrectable_rows=rows.get("uncorrectable")))
        rp = g.get("retired_pages") or {}
        total = int(rp.get("sbe") or 0) + int(rp.get("dbe") or 0)
        if rp.get("pending"):
            out.append(self._mk("fail", node, g, "a page retirement is pending until the GPU is reset", reset,
                                actual="pending", expected="none"))
        if total >= opts["retired_pages_max"]:
            out.append(self._mk("fail", node, g, f"{total} retired pages ({rp.get('dbe')} from double-bit errors)",
                                f"drain {node} and replace GPU {i} (RMA)", actual=total,
                                expected=f"< {opts['retired_pages_max']}"))
        return out

    def _clocks_and_link(self, node, g, opts):
        i = g["index"]
        out = []
        reasons = set(g.get("clock_reasons") or [])
        slow = sorted(reasons & HW_SLOW)
        if slow:
            thermal = any("thermal" in s for s in slow)
            out.append(self._mk(
                "warn", node, g, f"clocks are being slowed down: {', '.join(slow)} (the whole job runs at this GPU's "
                "speed)", ("check cooling (fans, airflow, inlet temperature) and " if thermal else "")
                + f"power delivery; nvidia-smi -q -d PERFORMANCE -i {i}; drain {node} if it persists",
                actual=slow, expected="no slowdown"))
        pcie = g.get("pcie") or {}
        gen, mgen, w, mw = pcie.get("gen"), pcie.get("max_gen"), pcie.get("width"), pcie.get("max_width")
        idle = "gpu_idle" in reasons
        reseat = (f"reseat GPU {i} / its riser and check the slot (lspci -vv -s {str(g.get('pci_bus_id') or '')[-12:]} "
                  "| grep LnkSta); check BIOS PCIe settings")
        if w is not None and mw is not None and w < mw:
            out.append(self._mk("warn", node, g, f"PCIe link runs at x{w}, below its x{mw}", reseat,
                                actual=f"gen{gen} x{w}", expected=f"gen{mgen} x{mw}"))
        elif gen is not None and mgen is not None and gen < mgen and not idle:
            # An idle GPU trains its link down to save power; only a busy one below max gen is a problem.
            out.append(self._mk("warn", node, g, f"PCIe link runs at gen{gen} while busy, below its gen{mgen}", reseat,
                                actual=f"gen{gen} x{w}", expected=f"gen{mgen} x{mw}"))
        temp, slow_at = g.get("temperature_c"), g.get("temperature_slowdown_c")
        warn_at = opts["temp_warn_c"]
        if slow_at:
            warn_at = min(warn_at, float(slow_at) - 5)
        if temp is not None and temp >= warn_at:
            out.append(self._mk("warn", node, g, f"temperature {temp} C (slowdown at {slow_at} C)",
                                "check cooling: fans, airflow, blocked inlets, data-centre inlet temperature",
                                actual=temp, expected=f"< {warn_at:g} C"))
        return out

    def _power_and_links(self, node, g, gpus, opts):
        i = g["index"]
        out = []
        lim, dflt = g.get("power_enforced_limit_w") or g.get("power_limit_w"), g.get("power_default_limit_w")
        ratio = opts["power_cap_ratio"]
        if lim and dflt and lim < ratio * dflt:
            out.append(self._mk("warn", node, g, f"power limit {lim:g} W is below the default {dflt:g} W: the GPU is "
                                "capped and runs slower", f"sudo nvidia-smi -i {i} -pl {dflt:g}",
                                actual=f"{lim:g} W", expected=f"{dflt:g} W"))
        if opts["require_persistence"] and g.get("persistence_mode") is False:
            out.append(self._mk("warn", node, g, "persistence mode is off: the driver state is torn down between jobs "
                                "(slow start, lost settings)", "sudo nvidia-smi -pm 1  # or enable nvidia-persistenced",
                                actual="off", expected="on"))
        nv = g.get("nvlink")
        if nv and nv.get("inactive") and nv.get("active"):
            out.append(self._mk("warn", node, g, f"NVLink link(s) {nv['inactive']} down, {len(nv['active'])} up: GPU "
                                "traffic falls back to slower links", f"nvidia-smi nvlink -s -i {i}; reset the GPU "
                                f"(sudo nvidia-smi -r -i {i}) or reseat; check nvidia-fabricmanager on NVSwitch systems",
                                actual=nv["inactive"], expected="all links up"))
        elif nv and nv.get("links") and not nv.get("active"):
            peers_up = [p["index"] for p in gpus if p is not g and ((p.get("nvlink") or {}).get("active"))]
            if peers_up:
                out.append(self._mk("warn", node, g, f"all {nv['links']} NVLink links are down while GPU(s) {peers_up} "
                                    "have theirs up", f"reset GPU {i} (sudo nvidia-smi -r -i {i}); check "
                                    "nvidia-fabricmanager (systemctl status nvidia-fabricmanager)",
                                    actual="0 links up", expected=f"{nv['links']} links up"))
        return out

    def _xids(self, node, f, gpus, opts):
        out = []
        by_index = {g["index"]: g for g in gpus}
        by_bus = {bus_key(g.get("pci_bus_id")): g for g in gpus}
        for ev in (f.get("xid_watch") or {}).get("events") or []:
            g = by_index.get(ev.get("gpu")) or {"index": ev.get("gpu"), "uuid": ev.get("uuid")}
            level = "fail" if ev.get("kind") == "hw" else "warn"
            out.append(self._mk(level, node, g, f"Xid {ev['xid']} ({ev.get('meaning')}) happened during the check",
                                _xid_fix(node, g, ev["xid"]), actual=f"Xid {ev['xid']}", expected="no Xid", xid=ev["xid"]))
        klog = f.get("kernel_log")
        if klog is None:
            return out
        if not klog.get("readable"):
            out.append(self.skip(f"Xid scan of the kernel log skipped on {node}: {klog.get('error')}", [node],
                                 actual=klog.get("error"), expected="a readable kernel log",
                                 fix="run as root or grant CAP_SYSLOG (or sysctl kernel.dmesg_restrict=0) to scan "
                                     "for NVRM Xid errors"))
            return out
        recent = opts["xid_recent_s"]
        worst: dict[tuple, dict] = {}
        for x in klog.get("xids") or []:
            if x.get("kind") != "hw":
                continue  # application Xids (13, 31, 43, 45) are the program's business
            key = (bus_key(x.get("pci")), x["xid"])
            if key not in worst or (x.get("age_s") or 0) < (worst[key].get("age_s") or 0):
                worst[key] = dict(x, count=worst.get(key, {}).get("count", 0) + 1)
            else:
                worst[key]["count"] += 1
        for (bkey, xid), x in sorted(worst.items(), key=lambda kv: (kv[0][0] or (0, 0, 0), kv[0][1])):
            g = by_bus.get(bkey) or {"index": "?", "uuid": None, "pci_bus_id": x.get("pci")}
            age = x.get("age_s")
            is_recent = age is None or age <= recent
            when = f"{_ago(age)} ago" if age is not None else "since boot"
            out.append(self._mk("fail" if is_recent else "warn", node, g,
                                f"kernel log: Xid {xid} ({x['meaning']}) x{x['count']}, last {when}",
                                _xid_fix(node, g, xid), actual=x["line"], expected="no hardware Xid", xid=xid))
        return out


def _xid_fix(node, g, xid) -> str:
    i = quote(str(g.get("index")))  # another node's value, in a line to paste
    if xid in (79, 64, 140):
        return f"drain {node}; reboot it (Xid {xid} needs a reboot); replace GPU {i} if it returns"
    if xid == 74:
        return f"drain {node}; reset GPU {i} (sudo nvidia-smi -r -i {i}), check NVLink: nvidia-smi nvlink -s -i {i}"
    return f"drain {node}; reset GPU {i}: sudo nvidia-smi -r -i {i} (or reboot); replace it if Xids return"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
