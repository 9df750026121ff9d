"""NVML access for the GPU checks (gpu, gpu-health, gpu-perf): a session, a field reader that turns
NotSupported into None, one GPU's snapshot as plain JSON, and how findings name a GPU (gpu-health's own
reads: nvml_health.py).

pynvml is imported inside ``nvml_session`` (tests put a fake in ``sys.modules["pynvml"]``; the CLI never
pays for it).
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

# NVML init errors that mean "no NVIDIA driver here" (SKIP unless GPUs were expected), by code.
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NO_DRIVER_CODES = {NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND}

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

# Clock-event (formerly "throttle") reason bits, as nvidia-ml-py names them (nvmlClocksEventReason*).
CLOCK_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}


class NvmlUnavailable(Exception):
    """nvmlInit failed; ``code`` is the NVML error code (None: pynvml itself could not be imported)."""

    def __init__(self, message: str, code: int | None):
        super().__init__(message)
        self.code = code

    @property
    def no_driver(self) -> bool:
        return self.code is None or self.code in NO_DRIVER_CODES


@contextlib.contextmanager
def nvml_session():
    """``with nvml_session() as pynvml:`` -- nvmlInit/nvmlShutdown around the block (NVML refcounts them,
    so concurrent gathers are fine). Raises NvmlUnavailable when the library or driver is missing."""
    try:
        import pynvml
    except Exception as exc:  # noqa: BLE001 - nvidia-ml-py missing or broken
        raise NvmlUnavailable(f"pynvml (nvidia-ml-py) cannot be imported: {exc}", None) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML: {exc}", getattr(exc, "value", None)) from None
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def text(value: Any) -> Any:
    """NVML strings arrive as bytes from ctypes char arrays on some versions: always give str."""
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else value


class Reader:
    """Calls NVML one field at a time: NotSupported becomes None and is listed in ``unsupported``, any other
    NVML error becomes None with the message in ``errors`` (a real H100 answers NotSupported to several)."""

    def __init__(self, pynvml):
        self.nv = pynvml
        self.unsupported: list[str] = []
        self.errors: dict[str, str] = {}

    def get(self, key: str, fn_name: str, *args, conv: Callable[[Any], Any] | None = None) -> Any:
        fn = getattr(self.nv, fn_name, None)
        if fn is None:  # an older nvidia-ml-py without this call
            self.unsupported.append(key)
            return None
        try:
            value = fn(*args)
        except self.nv.NVMLError as exc:
            if getattr(exc, "value", None) == NVML_ERROR_NOT_SUPPORTED:
                self.unsupported.append(key)
            else:
                self.errors[key] = str(exc)
            return None
        return conv(value) if conv else value


def decode_reasons(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in sorted(CLOCK_REASONS.items()) if mask & bit]


def clock_reasons(r: Reader, h) -> int | None:
    """Current clock-event reasons; newer drivers call them 'event', older ones 'throttle' reasons."""
    if hasattr(r.nv, "nvmlDeviceGetCurrentClocksEventReasons"):
        mask = r.get("clock_reasons", "nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is not None or "clock_reasons" in r.unsupported:
            return mask
    return r.get("clock_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)


def _processes(r: Reader, h) -> list[dict] | None:
    procs = r.get("processes", "nvmlDeviceGetComputeRunningProcesses", h)
    if procs is None:
        return None
    out = []
    for p in procs:
        pid = int(getattr(p, "pid", 0))
        used = getattr(p, "usedGpuMemory", None)
        out.append({"pid": pid, "used_memory_bytes": int(used) if used is not None else None,
                    "name": _proc_name(pid), "ours": _is_ours(pid)})
    return out


def _proc_name(pid: int) -> str | None:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another container's pid, or gone already
        return None


def _is_ours(pid: int) -> bool:
    """ddpdoctor itself or its children (gpu-perf's workers measure while this check looks)."""
    me = os.getpid()
    if pid == me:
        return True
    try:
        import psutil

        return any(p.pid == me for p in psutil.Process(pid).parents())
    except Exception:  # noqa: BLE001
        return False


def _mig_devices(r: Reader, h) -> list[str]:
    count = r.get("mig_max", "nvmlDeviceGetMaxMigDeviceCount", h) or 0
    out = []
    for i in range(int(count)):
        try:
            mh = r.nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            out.append(text(r.nv.nvmlDeviceGetUUID(mh)))
        except r.nv.NVMLError:
            continue  # slot without an instance
    return out


def snapshot(nv, index: int) -> dict:
    """One GPU's identity and state as plain JSON. A GPU that is lost answers {"index", "lost": True, "error"}."""
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        name = text(nv.nvmlDeviceGetName(h))
        uuid = text(nv.nvmlDeviceGetUUID(h))
    except nv.NVMLError as exc:
        return {"index": index, "name": None, "uuid": None, "pci_bus_id": None, "lost": True, "error": str(exc),
                "error_code": getattr(exc, "value", None)}
    r = Reader(nv)
    pci = r.get("pci_bus_id", "nvmlDeviceGetPciInfo", h)
    mem = r.get("memory", "nvmlDeviceGetMemoryInfo", h)
    ecc = r.get("ecc_mode", "nvmlDeviceGetEccMode", h)
    mig = r.get("mig_mode", "nvmlDeviceGetMigMode", h)
    pcie = {
        "gen": r.get("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h),
        "max_gen": r.get("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", h),
        "width": r.get("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h),
        "max_width": r.get("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", h),
    }
    rows = r.get("remapped_rows", "nvmlDeviceGetRemappedRows", h)
    mask = clock_reasons(r, h)
    compute = r.get("compute_mode", "nvmlDeviceGetComputeMode", h)
    g = {
        "index": index, "name": name, "uuid": uuid,
        "pci_bus_id": text(getattr(pci, "busId", None)) if pci is not None else None,
        "memory_total_bytes": int(mem.total) if mem is not None else None,
        "memory_used_bytes": int(mem.used) if mem is not None else None,
        "ecc_enabled": bool(ecc[0]) if ecc is not None else None,
        "ecc_pending_enabled": bool(ecc[1]) if ecc is not None else None,
        "ecc_uncorrected_volatile": r.get("ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors", h,
                                          nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        if ecc is not None else None,
        "remapped_rows": ({"correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]),
                           "failure": bool(rows[3])} if rows is not None else None),
        "compute_mode": COMPUTE_MODES.get(compute, str(compute)) if compute is not None else None,
        "mig_enabled": bool(mig[0]) if mig is not None else None,
        "mig_pending_enabled": bool(mig[1]) if mig is not None else None,
        "mig_devices": _mig_devices(r, h) if mig is not None and mig[0] else [],
        "processes": _processes(r, h),
        "temperature_c": r.get("temperature_c", "nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU),
        "clock_reasons_mask": mask,
        "clock_reasons": decode_reasons(mask),
        "pcie": pcie,
        "lost": False,
    }
    g["unsupported"] = sorted(set(r.unsupported))
    if r.errors:
        g["errors"] = r.errors
    return g


def gpu_label(node: str, g: dict) -> str:
    """How every GPU finding names its GPU: node, index, UUID and PCI bus id."""
    return f"{node} GPU {g.get('index')} ({g.get('uuid') or 'uuid ?'}, {g.get('pci_bus_id') or 'pci ?'})"


def gpu_details(g: dict) -> dict:
    return {"gpu": g.get("index"), "uuid": g.get("uuid"), "pci_bus_id": g.get("pci_bus_id"), "name": g.get("name")}
