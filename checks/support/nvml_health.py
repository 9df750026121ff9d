"""gpu-health's NVML reads: what it reads of a GPU beyond the gpu check's snapshot (lifetime ECC, thresholds,
power limits, persistence, retired pages, NVLink) and the wait for critical Xid events. The session, the field
reader and how a GPU is named live in nvml.py."""
from __future__ import annotations

import time
from typing import Any

from .kernel_log import xid_info
from .nvml import Reader, text


def health_fields(nv, index: int) -> dict:
    """What gpu-health reads of one GPU beyond the gpu check's ``snapshot``: its identity (to name it and to
    match the snapshot), lifetime ECC, thresholds, power limits, persistence, retired pages, NVLink. A GPU
    that is lost answers {"index", "lost": True, "error"}."""
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        ident = {"index": index, "name": text(nv.nvmlDeviceGetName(h)), "uuid": text(nv.nvmlDeviceGetUUID(h))}
    except nv.NVMLError as exc:
        return {"index": index, "name": None, "uuid": None, "pci_bus_id": None, "lost": True, "error": str(exc)}
    r = Reader(nv)
    pci = r.get("pci_bus_id", "nvmlDeviceGetPciInfo", h)
    ident.update(pci_bus_id=text(getattr(pci, "busId", None)) if pci is not None else None, lost=False)
    ecc_on = r.get("ecc_mode", "nvmlDeviceGetEccMode", h) is not None
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
    extra["unsupported"] = sorted(set(r.unsupported))
    if r.errors:
        extra["errors"] = dict(r.errors)
    return {**ident, **extra}


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
