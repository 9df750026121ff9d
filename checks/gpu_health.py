"""gpu-health: hardware faults of each GPU on this node (issue #7 item 1; failure catalog E4, E6).

Judged per GPU, each finding naming node, GPU index, UUID and PCI bus id, with the fix: volatile and
aggregate uncorrected ECC errors, pending/failed row remaps, retired pages (where the GPU retires pages,
pre-Ampere), Xid events (NVML event set during a short wait, plus `NVRM: Xid` lines in the kernel log when
readable), clock slowdowns (HW/thermal/power brake), PCIe link below its max generation or width,
temperature, power cap below default, persistence mode off, NVLink links down.

Not here (gpu owns them): driver presence, GPU counts and visibility, compute mode, MIG, busy GPUs, lost
GPUs; model/count differences across nodes are the parity check's. A node without the driver is a Skip.
"""
from __future__ import annotations

import re
import subprocess
import time
from typing import Any, Iterable

from ddpdoctor.api import Check, Option, Skip, per_node

from .gpu import NvmlUnavailable, Reader, gpu_details, gpu_label, nvml_session, snapshot, text

HW_SLOW = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}

# Xid meanings (NVIDIA "Xid Errors" table). kind "hw": the GPU/driver needs attention; "app": usually the
# program's own fault (bad memory access, killed); anything unknown is treated as "hw" to be safe.
XIDS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception (often the application)", "app"),
    31: ("GPU memory page fault (often the application)", "app"),
    43: ("GPU stopped processing (often the application)", "app"),
    45: ("preemptive cleanup: a process was killed", "app"),
    48: ("double-bit ECC error", "hw"),
    61: ("internal micro-controller breakpoint/warning", "hw"),
    62: ("internal micro-controller halt", "hw"),
    63: ("ECC page retirement or row remap recorded", "hw"),
    64: ("ECC page retirement or row remap failed", "hw"),
    74: ("NVLink error", "hw"),
    79: ("GPU has fallen off the bus", "hw"),
    92: ("high single-bit ECC error rate", "hw"),
    94: ("contained ECC error", "hw"),
    95: ("uncontained ECC error", "hw"),
    119: ("GSP RPC timeout", "hw"),
    120: ("GSP error", "hw"),
    140: ("unrecovered ECC error", "hw"),
    154: ("GPU recovery action changed (reset or reboot required)", "hw"),
}

# "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." (dmesg, and journalctl -k
# -o short-monotonic, both print seconds since boot first).
XID_LINE = re.compile(r"\[\s*(?P<t>\d+\.\d+)\].*?NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\):\s*(?P<xid>\d+)(?P<rest>.*)$")


def xid_info(xid: int) -> tuple[str, str]:
    return XIDS.get(int(xid), ("unlisted Xid", "hw"))


def bus_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """NVML "00000000:3B:00.0" and the kernel's "0000:3b:00" name the same GPU: compare (domain, bus, device)."""
    if not bus_id:
        return None
    parts = str(bus_id).split(".")[0].split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (ValueError, IndexError):
        return None


def parse_kernel_xids(log: str, uptime_s: float | None, limit: int = 200) -> list[dict]:
    """Xid lines of a kernel log -> [{"pci", "xid", "age_s", "meaning", "kind", "line"}] (age None if unknown);
    the last ``limit`` only: a flapping GPU logs thousands and facts travel between nodes."""
    out = []
    for line in log.splitlines():
        m = XID_LINE.search(line)
        if not m:
            continue
        xid = int(m.group("xid"))
        meaning, kind = xid_info(xid)
        t = float(m.group("t"))
        out.append({"pci": m.group("pci"), "xid": xid, "meaning": meaning, "kind": kind,
                    "age_s": round(uptime_s - t, 1) if uptime_s is not None and uptime_s >= t else None,
                    "line": line.strip()[:300]})
    return out[-limit:]


def read_kernel_log(timeout_s: float = 5.0) -> dict:
    """The kernel ring buffer via dmesg, else journalctl -k; unreadable (no CAP_SYSLOG, no binary) is recorded."""
    errors = []
    for cmd in (["dmesg"], ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"]):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{cmd[0]}: {exc}")
            continue
        if p.returncode == 0 and p.stdout.strip():
            return {"readable": True, "source": cmd[0], "text": p.stdout, "error": None}
        errors.append(f"{cmd[0]}: {(p.stderr or '').strip().splitlines()[-1] if p.stderr.strip() else f'exit {p.returncode}'}")
    return {"readable": False, "source": None, "text": "", "error": "; ".join(errors)}


def _uptime() -> float | None:
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _health_extras(nv, g: dict) -> dict:
    """What gpu-health reads beyond the shared snapshot."""
    h = nv.nvmlDeviceGetHandleByIndex(g["index"])
    r = Reader(nv)
    ecc_on = g.get("ecc_enabled") is not None
    extra: dict[str, Any] = {
        "ecc_uncorrected_aggregate": r.get("ecc_uncorrected_aggregate", "nvmlDeviceGetTotalEccErrors", h,
                                           nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC) if ecc_on else None,
        "temperature_slowdown_c": r.get("temperature_slowdown_c", "nvmlDeviceGetTemperatureThreshold", h,
                                        getattr(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)),
        "power_limit_w": _watts(r.get("power_limit", "nvmlDeviceGetPowerManagementLimit", h)),
        "power_default_limit_w": _watts(r.get("power_default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", h)),
        "power_enforced_limit_w": _watts(r.get("power_enforced_limit", "nvmlDeviceGetEnforcedPowerLimit", h)),
        "persistence_mode": _flag(r.get("persistence_mode", "nvmlDeviceGetPersistenceMode", h)),
    }
    sbe = r.get("retired_pages_sbe", "nvmlDeviceGetRetiredPages", h,
                nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = r.get("retired_pages_dbe", "nvmlDeviceGetRetiredPages", h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = r.get("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", h)
    extra["retired_pages"] = (None if sbe is None and dbe is None and pending is None else
                              {"sbe": len(sbe or []), "dbe": len(dbe or []), "pending": _flag(pending)})
    extra["nvlink"] = _nvlink(nv, h)
    extra["unsupported"] = sorted(set(g.get("unsupported", [])) | set(r.unsupported))
    if r.errors:
        extra["errors"] = {**g.get("errors", {}), **r.errors}
    return extra


def _watts(mw):
    return round(mw / 1000.0, 1) if mw is not None else None


def _flag(v):
    return bool(v) if v is not None else None


def _nvlink(nv, h) -> dict | None:
    """{"links": n, "active": [..], "inactive": [..]}; None when the GPU has no NVLink (NotSupported on link 0)."""
    active, inactive = [], []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nv.nvmlDeviceGetNvLinkState(h, link)
        except nv.NVMLError:
            if link == 0:
                return None
            continue  # links beyond this GPU's count answer InvalidArgument/NotSupported
        (active if state else inactive).append(link)
    return {"links": len(active) + len(inactive), "active": active, "inactive": inactive}


def watch_xids(nv, gpus: list[dict], wait_ms: int) -> dict:
    """Register every GPU for critical Xid events and wait ``wait_ms``; returns {"events", "unwatched", "error"}."""
    out: dict[str, Any] = {"events": [], "unwatched": [], "error": None, "wait_ms": wait_ms}
    if wait_ms <= 0:
        return out
    by_uuid = {g.get("uuid"): g for g in gpus}
    try:
        es = nv.nvmlEventSetCreate()
    except nv.NVMLError as exc:
        out["error"] = f"nvmlEventSetCreate: {exc}"
        return out
    try:
        watched = 0
        for g in gpus:
            try:
                nv.nvmlDeviceRegisterEvents(nv.nvmlDeviceGetHandleByIndex(g["index"]), nv.nvmlEventTypeXidCriticalError, es)
                watched += 1
            except nv.NVMLError:
                out["unwatched"].append(g["index"])
        deadline = time.monotonic() + wait_ms / 1000.0
        while watched:
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                break
            try:
                ev = nv.nvmlEventSetWait(es, left)
            except nv.NVMLError:
                break  # Timeout: nothing happened (any other error: stop watching)
            try:
                uuid = text(nv.nvmlDeviceGetUUID(ev.device))
            except nv.NVMLError:
                uuid = None
            g = by_uuid.get(uuid, {})
            xid = int(ev.eventData)
            meaning, kind = xid_info(xid)
            out["events"].append({"gpu": g.get("index"), "uuid": uuid, "xid": xid, "meaning": meaning, "kind": kind})
    finally:
        try:
            nv.nvmlEventSetFree(es)
        except nv.NVMLError:
            pass
    return out


class GpuHealthCheck(Check):
    name = "gpu-health"
    description = "Per-GPU hardware faults: ECC, row remaps, retired pages, Xid, clock slowdowns, PCIe link, temperature, power, NVLink"
    phase = "local"
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
        opts = ctx.opts or {}
        try:
            with nvml_session() as nv:
                gpus = [snapshot(nv, i) for i in range(nv.nvmlDeviceGetCount())]
                for g in gpus:
                    if not g.get("lost"):
                        g.update(_health_extras(nv, g))
                ok = [g for g in gpus if not g.get("lost")]
                xid = watch_xids(nv, ok, int(opts.get("xid_wait_ms", 500)))
        except NvmlUnavailable as exc:
            raise Skip(f"no usable NVIDIA driver ({exc}); the gpu check reports it") from None
        facts: dict[str, Any] = {"gpus": gpus, "xid_watch": xid}
        if opts.get("kernel_log", True):
            log = read_kernel_log()
            facts["kernel_log"] = {"readable": log["readable"], "source": log["source"], "error": log["error"],
                                   "xids": parse_kernel_xids(log["text"], _uptime()) if log["readable"] else []}
        return facts

    def compare(self, facts_by_node, opts):
        return per_node(facts_by_node, lambda node, f: list(self._judge(node, f, opts)))

    # ---- judgement ---------------------------------------------------------------------------------------
    def _judge(self, node: str, f: dict, opts) -> Iterable:
        gpus = [g for g in f.get("gpus") or [] if not g.get("lost")]  # lost GPUs: the gpu check's finding
        found = []
        for g in gpus:
            found += self._memory(node, g, opts)
            found += self._clocks_and_link(node, g, opts)
            found += self._power_and_links(node, g, gpus, opts)
        found += self._xids(node, f, gpus, opts)
        yield from found
        if not any(r.level.value in ("warn", "fail") for r in found):
            yield self.passed(f"{node}: {len(gpus)} GPU(s) healthy (ECC, row remaps, Xid, clocks, PCIe link, "
                              "temperature, power)", [node], actual=len(gpus))

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
        if total >= int(opts.get("retired_pages_max", 60)):
            out.append(self._mk("fail", node, g, f"{total} retired pages ({rp.get('dbe')} from double-bit errors)",
                                f"drain {node} and replace GPU {i} (RMA)", actual=total,
                                expected=f"< {opts.get('retired_pages_max', 60)}"))
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
        warn_at = float(opts.get("temp_warn_c", 85.0))
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
        ratio = float(opts.get("power_cap_ratio", 0.9))
        if lim and dflt and lim < ratio * dflt:
            out.append(self._mk("warn", node, g, f"power limit {lim:g} W is below the default {dflt:g} W: the GPU is "
                                "capped and runs slower", f"sudo nvidia-smi -i {i} -pl {dflt:g}",
                                actual=f"{lim:g} W", expected=f"{dflt:g} W"))
        if opts.get("require_persistence", True) and g.get("persistence_mode") is False:
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
        recent = float(opts.get("xid_recent_s", 86400.0))
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
    i = g.get("index")
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
