"""gpu: which GPUs this node has and which ones the job can use (issue #2 item 4; failure catalog E1-E3, E5).

Split with gpu-health, so each finding is reported once:
  gpu         the driver is there (or not), how many GPUs NVML sees, what CUDA_VISIBLE_DEVICES selects
              (indices, UUIDs, MIG ids), what torch sees, how many the job needs (--gpus-per-node or the
              launcher's LOCAL_WORLD_SIZE), LOCAL_RANK beyond the visible GPUs, the driver's CUDA version against
              torch's, compute mode (E5), MIG mode, other processes already on a GPU, a GPU that is lost.
  gpu-health  hardware faults of GPUs that are visible: ECC, row remaps, retired pages, Xid, clock
              slowdowns, PCIe link, temperature, power cap, persistence, NVLink.
The facts hold a per-GPU snapshot (ECC counters, temperature, clocks, PCIe too: the report shows them), but
only gpu-health judges those. The NVML helpers here (``nvml_session``, ``snapshot``, ``gpu_label``) are shared
with gpu-health. pynvml and torch are imported inside functions: the CLI never pays for them.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterable

from ddpdoctor.api import Check, Option, per_node

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


def cuda_version_str(v: int | None) -> str | None:
    """NVML's CUDA driver version 12040 -> "12.4"."""
    if not v:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except (TypeError, ValueError):
        return None


def resolve_visible(raw: str | None, gpus: list[dict]) -> dict:
    """What CUDA_VISIBLE_DEVICES selects, the way CUDA reads it: comma-separated indices, GPU UUIDs (a unique
    prefix suffices) or MIG ids; the first entry that matches nothing ends the list (it and all after it are
    ignored). Returns {"set", "raw", "resolved": [NVML index...], "invalid", "ignored", "duplicates", "mig"}."""
    out = {"set": raw is not None, "raw": raw, "resolved": [], "invalid": None, "ignored": [], "duplicates": [],
           "mig": []}
    if raw is None:
        out["resolved"] = [g["index"] for g in gpus]
        return out
    entries = [e.strip() for e in raw.split(",")] if raw.strip() else []
    for pos, entry in enumerate(entries):
        idx = _match_entry(entry, gpus)
        if idx is None:
            out["invalid"] = entry
            out["ignored"] = entries[pos + 1:]
            break
        if entry.upper().startswith("MIG-"):
            out["mig"].append(entry)
        if idx in out["resolved"] and not entry.upper().startswith("MIG-"):
            out["duplicates"].append(entry)
            continue
        out["resolved"].append(idx)
    return out


def _match_entry(entry: str, gpus: list[dict]) -> int | None:
    if entry.isdigit():
        i = int(entry)
        return i if any(g["index"] == i for g in gpus) else None
    low = entry.lower()
    if low.startswith("mig-gpu-"):  # legacy MIG-GPU-<uuid>/<gi>/<ci>
        parent = low[4:].split("/")[0]
        hits = [g["index"] for g in gpus if (g.get("uuid") or "").lower() == parent]
        return hits[0] if hits else None
    if low.startswith("mig-"):
        hits = [g["index"] for g in gpus if any(m.lower() == low for m in g.get("mig_devices") or [])]
        return hits[0] if hits else None
    if low.startswith("gpu-") and len(low) > 4:
        hits = [g["index"] for g in gpus if (g.get("uuid") or "").lower().startswith(low)]
        return hits[0] if len(hits) == 1 else None
    return None


def torch_view() -> dict:
    """What torch sees; never raises (a broken torch is recorded, the torch-build check judges it)."""
    try:
        import torch

        return {"torch_version": torch.__version__, "torch_cuda_version": torch.version.cuda,
                "torch_device_count": int(torch.cuda.device_count()) if torch.version.cuda else 0,
                "torch_error": None}
    except Exception as exc:  # noqa: BLE001
        return {"torch_version": None, "torch_cuda_version": None, "torch_device_count": None,
                "torch_error": f"{type(exc).__name__}: {exc}"}


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


class GpuCheck(Check):
    name = "gpu"
    description = "NVIDIA driver, GPUs visible to CUDA and torch vs the GPUs the job needs; compute mode, MIG, busy GPUs"
    phase = "local"
    imports = ("torch",)
    timeout_s = 60.0
    options = {
        "allow_foreign_processes": Option(False, "other processes on a GPU are not worth a warning"),
    }

    def gather(self, ctx) -> dict:
        facts: dict[str, Any] = {
            "driver_version": None, "cuda_driver_version": None, "gpus": [], "no_driver": False,
            "nvml_error": None, "nvml_error_code": None,
            "expected": {"gpus_per_node": (ctx.run or {}).get("gpus_per_node"),
                         "local_world_size": _int_env("LOCAL_WORLD_SIZE"), "local_rank": _int_env("LOCAL_RANK")},
        }
        raw_cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            with nvml_session() as nv:
                r = Reader(nv)
                facts["driver_version"] = r.get("driver_version", "nvmlSystemGetDriverVersion", conv=text)
                facts["cuda_driver_version"] = cuda_version_str(
                    r.get("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"))
                count = nv.nvmlDeviceGetCount()
                facts["gpus"] = [snapshot(nv, i) for i in range(count)]
        except NvmlUnavailable as exc:
            facts.update(no_driver=exc.no_driver, nvml_error=str(exc), nvml_error_code=exc.code)
        facts["cuda_visible_devices"] = resolve_visible(raw_cvd, [g for g in facts["gpus"] if not g.get("lost")])
        facts["visible_count"] = len(facts["cuda_visible_devices"]["resolved"])
        facts.update(torch_view())
        return facts

    def compare(self, facts_by_node, opts):
        return per_node(facts_by_node, lambda node, f: self._judge(node, f, opts))

    # ---- judgement, one node at a time -------------------------------------------------------------------
    def _judge(self, node: str, f: dict, opts) -> Iterable:
        exp = f.get("expected") or {}
        expected = opts.get("gpus_per_node") or exp.get("gpus_per_node") or exp.get("local_world_size")
        source = ("--gpus-per-node" if (opts.get("gpus_per_node") or exp.get("gpus_per_node"))
                  else "LOCAL_WORLD_SIZE (processes per node)")
        if f.get("nvml_error"):
            yield from self._no_nvml(node, f, expected, source)
            return
        found = []
        found += self._visibility(node, f, expected, source)
        found += self._torch_and_driver(node, f, expected)
        found += self._state(node, f, opts)
        yield from found
        if not any(r.level.value in ("warn", "fail") for r in found):
            gpus = [g for g in f.get("gpus") or [] if not g.get("lost")]
            names = sorted({g.get("name") for g in gpus})
            yield self.passed(
                f"{node}: {f.get('visible_count')} of {len(gpus)} GPU(s) visible ({', '.join(map(str, names)) or 'none'});"
                f" torch sees {f.get('torch_device_count')}" + (f", {expected} expected" if expected else "")
                + f"; driver {f.get('driver_version')}, CUDA {f.get('cuda_driver_version')}",
                [node], actual=f.get("visible_count"), expected=expected)

    def _no_nvml(self, node, f, expected, source):
        err = f.get("nvml_error")
        if f.get("no_driver"):
            msg = f"no NVIDIA driver on {node} ({err})"
            if expected:
                yield self.fail(f"{msg}, but {expected} GPU(s) expected ({source})", [node], actual=err,
                                expected=f"{expected} GPUs", fix="install the NVIDIA driver (nvidia-smi must work) "
                                "or run on a GPU node; in a container use --gpus all / the NVIDIA container toolkit")
            else:
                yield self.skip(f"{msg}: GPU checks do not apply", [node], actual=err)
            return
        fix = ("reboot the node (or unload and reload the nvidia kernel modules): the driver was upgraded without one"
               if f.get("nvml_error_code") == NVML_ERROR_LIB_RM_VERSION_MISMATCH
               else "check `nvidia-smi` on this node; reinstall or reload the NVIDIA driver")
        yield self.fail(f"NVML does not work on {node}: {err}", [node], actual=err, expected="nvmlInit succeeds", fix=fix)

    def _visibility(self, node, f, expected, source):
        out = []
        gpus = f.get("gpus") or []
        cvd = f.get("cuda_visible_devices") or {}
        for g in gpus:
            if g.get("lost"):
                out.append(self.fail(f"{node} GPU {g['index']} does not answer NVML: {g.get('error')}", [node],
                                     actual=g.get("error"), expected="every GPU answers",
                                     fix=f"drain {node}; reset the GPU (`nvidia-smi -r -i {g['index']}`) or reboot; "
                                         "replace it if it stays lost (Xid 79: fallen off the bus)",
                                     details={"gpu": g["index"]}))
        valid = ", ".join(f"{g['index']} ({g.get('uuid')})" for g in gpus if not g.get("lost")) or "none"
        if cvd.get("invalid") is not None:
            ignored = f" and ignores what follows it ({','.join(cvd['ignored'])})" if cvd.get("ignored") else ""
            out.append(self.fail(
                f"CUDA_VISIBLE_DEVICES={cvd.get('raw')} on {node}: entry {cvd['invalid']!r} matches no GPU; "
                f"CUDA stops at it{ignored}", [node], actual=cvd.get("raw"), expected=f"indices or UUIDs of: {valid}",
                fix=f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(len(gpus))) or '<ids>'}  "
                    "# or unset it; check the scheduler's GPU binding"))
        if cvd.get("duplicates"):
            out.append(self.fail(
                f"CUDA_VISIBLE_DEVICES={cvd.get('raw')} on {node} names the same GPU twice ({', '.join(cvd['duplicates'])})",
                [node], actual=cvd.get("raw"), expected="each GPU once",
                fix="list each GPU once; two ranks on one GPU fail with NCCL 'Duplicate GPU detected'"))
        visible = int(f.get("visible_count") or 0)
        torch_n = f.get("torch_device_count")
        usable = min(visible, torch_n) if isinstance(torch_n, int) and f.get("torch_cuda_version") else visible
        if expected and usable < int(expected):
            out.append(self.fail(
                f"{node} has {usable} usable GPU(s) but the job needs {expected} ({source}); NVML sees {len(gpus)}, "
                f"CUDA_VISIBLE_DEVICES selects {visible}, torch sees {torch_n}", [node],
                actual=usable, expected=int(expected),
                fix=f"run with --nproc-per-node={usable} on {node}, or free/expose more GPUs "
                    "(CUDA_VISIBLE_DEVICES, the scheduler's --gpus, the container's --gpus)"))
        lr = (f.get("expected") or {}).get("local_rank")
        if isinstance(lr, int) and usable and lr >= usable:
            out.append(self.fail(
                f"LOCAL_RANK={lr} on {node} but only {usable} GPU(s) are visible: cuda:{lr} is an invalid device "
                "ordinal", [node], actual=lr, expected=f"< {usable}",
                fix="with one GPU bound per task use torch.cuda.set_device(0); otherwise make --nproc-per-node "
                    "match the visible GPUs"))
        return out

    def _torch_and_driver(self, node, f, expected):
        out = []
        visible = int(f.get("visible_count") or 0)
        if f.get("torch_error"):
            out.append(self.warn(f"torch cannot be imported on {node}: {f['torch_error']}", [node],
                                 actual=f["torch_error"], expected="import torch works",
                                 fix="pip install torch (see the torch-build check)"))
            return out
        if visible and not f.get("torch_cuda_version"):
            make = self.fail if expected else self.warn
            out.append(make(f"torch {f.get('torch_version')} on {node} is a CPU build but {visible} GPU(s) are visible",
                            [node], actual=f.get("torch_version"), expected="a CUDA build of torch",
                            fix="pip install torch --index-url https://download.pytorch.org/whl/cu124  "
                                "# pick the CUDA version your driver supports"))
            return out
        torch_n = f.get("torch_device_count")
        if f.get("torch_cuda_version") and isinstance(torch_n, int) and torch_n != visible:
            out.append(self.warn(
                f"torch sees {torch_n} GPU(s) on {node} but NVML with CUDA_VISIBLE_DEVICES selects {visible}",
                [node], actual=torch_n, expected=visible,
                fix="check the CUDA runtime: python -c 'import torch; print(torch.cuda.device_count())' shows the "
                    "error; a driver older than torch's CUDA or a MIG/cgroup restriction hides GPUs"))
        drv, tcu = _version_tuple(f.get("cuda_driver_version")), _version_tuple(f.get("torch_cuda_version"))
        if drv and tcu and drv < tcu:
            make = self.fail if drv[0] < tcu[0] else self.warn
            why = ("CUDA driver version is insufficient for CUDA runtime version" if drv[0] < tcu[0]
                   else "minor-version compatibility only: PTX JIT and some features fail")
            out.append(make(
                f"the driver on {node} supports CUDA {f.get('cuda_driver_version')} but torch was built for CUDA "
                f"{f.get('torch_cuda_version')} ({why})", [node], actual=f.get("cuda_driver_version"),
                expected=f">= {f.get('torch_cuda_version')}",
                fix=f"upgrade the NVIDIA driver on {node} (now {f.get('driver_version')}), or install a torch built "
                    f"for CUDA {f.get('cuda_driver_version')}"))
        return out

    def _state(self, node, f, opts):
        out = []
        selected = set((f.get("cuda_visible_devices") or {}).get("resolved") or [])
        for g in f.get("gpus") or []:
            if g.get("lost") or g["index"] not in selected:
                continue
            label, det = gpu_label(node, g), gpu_details(g)
            foreign = [p for p in g.get("processes") or [] if not p.get("ours")]
            mode = g.get("compute_mode")
            if mode == "prohibited":
                out.append(self.fail(f"{label} is in compute mode Prohibited: no process can use it", [node],
                                     actual=mode, expected="default", details=det,
                                     fix=f"sudo nvidia-smi -i {g['index']} -c DEFAULT"))
            elif mode in ("exclusive_process", "exclusive_thread"):
                make = self.fail if foreign else self.warn
                out.append(make(
                    f"{label} is in compute mode {mode}" + (" and already has a process" if foreign else "")
                    + ": a second CUDA context on it fails with 'all CUDA-capable devices are busy or unavailable'",
                    [node], actual=mode, expected="default", details=det,
                    fix=f"sudo nvidia-smi -i {g['index']} -c DEFAULT  # or make sure one process per GPU, nothing else"))
            if foreign and not opts.get("allow_foreign_processes"):
                listed = ", ".join(f"pid {p['pid']}" + (f" {p['name']}" if p.get("name") else "")
                                   + (f" ({p['used_memory_bytes'] / 2**30:.1f} GiB)" if p.get("used_memory_bytes") else "")
                                   for p in foreign[:6])
                out.append(self.warn(
                    f"{label} already runs {len(foreign)} other process(es): {listed}", [node],
                    actual=[p["pid"] for p in foreign], expected="no other process on the GPU", details=det,
                    fix=f"kill {' '.join(str(p['pid']) for p in foreign[:6])}  # after checking with "
                        f"nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv -i {g['index']}"))
            if g.get("mig_enabled"):
                out.append(self.warn(
                    f"{label} has MIG enabled ({len(g.get('mig_devices') or [])} instance(s)): a process sees one MIG "
                    "instance and there is no P2P/NVLink between instances, so NCCL is slow or fails",
                    [node], actual="MIG on", expected="MIG off for DDP", details=det,
                    fix=f"sudo nvidia-smi -i {g['index']} -mig 0 && sudo nvidia-smi -r -i {g['index']}"))
            elif g.get("mig_pending_enabled") is not None and g.get("mig_pending_enabled") != g.get("mig_enabled"):
                out.append(self.warn(f"{label}: a MIG mode change is pending until the GPU is reset", [node],
                                     actual=g.get("mig_pending_enabled"), expected=g.get("mig_enabled"), details=det,
                                     fix=f"sudo nvidia-smi -r -i {g['index']}"))
        return out
