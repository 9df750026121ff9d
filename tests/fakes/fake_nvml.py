"""A fake ``pynvml`` (nvidia-ml-py) module, so the GPU checks run on machines without an NVIDIA GPU.

How to use it::

    from tests.fakes import fake_nvml
    fake = fake_nvml.make()                       # default scenario (below)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    # ... code that does ``import pynvml`` now talks to the fake ...
    assert fake.state.init_count == fake.state.shutdown_count

Building devices: ``fake_nvml.make(gpus=[FakeGpu(...), ...], driver_version=..., cuda_driver_version=...)``.
Each ``FakeGpu`` field is what the matching NVML call returns (see the dataclass: name, uuid, pci_bus_id,
memory, ECC mode and counters, row remaps, retired pages, compute/MIG mode, processes, temperature,
clock-event reasons, PCIe link, power limits, persistence, NVLink states, Xid events to deliver).
``fake_nvml.make_no_driver()`` builds a module whose ``nvmlInit`` raises ``NVMLError_LibraryNotFound``
(``code=`` picks another init error, e.g. ``NVML_ERROR_DRIVER_NOT_LOADED`` or
``NVML_ERROR_LIB_RM_VERSION_MISMATCH``).

Simulating NotSupported: put the NVML function's name in ``FakeGpu.unsupported`` (e.g.
``{"nvmlDeviceGetRetiredPages", "nvmlDeviceGetNvLinkState"}``, which is what a real H100 answered): that call
then raises ``NVMLError_NotSupported`` for that device, as the real library does per field. A field set
to ``None`` (``ecc_mode=None``, ``nvlink=None``...) is also answered with NotSupported.

Implemented (same names, argument order and return shapes as nvidia-ml-py 12/13): nvmlInit,
nvmlShutdown, nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion(_v2), nvmlDeviceGetCount,
nvmlDeviceGetHandleByIndex, nvmlDeviceGetIndex, nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlDeviceGetPciInfo
(.busId as bytes, like ctypes), nvmlDeviceGetMemoryInfo (.total/.used/.free), nvmlDeviceGetEccMode
([current, pending]), nvmlDeviceGetTotalEccErrors(h, error_type, counter_type), nvmlDeviceGetRemappedRows
((corr, unc, pending, failure)), nvmlDeviceGetRetiredPages(h, cause), nvmlDeviceGetRetiredPagesPendingStatus,
nvmlDeviceGetComputeMode, nvmlDeviceGetMigMode ([current, pending]), nvmlDeviceGetMaxMigDeviceCount,
nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetComputeRunningProcesses (objects with .pid and
.usedGpuMemory), nvmlDeviceGetTemperature, nvmlDeviceGetTemperatureThreshold,
nvmlDeviceGetCurrentClocksEventReasons / nvmlDeviceGetCurrentClocksThrottleReasons,
nvmlDeviceGetCurrPcieLinkGeneration / MaxPcieLinkGeneration / CurrPcieLinkWidth / MaxPcieLinkWidth,
nvmlDeviceGetPowerManagementLimit / PowerManagementDefaultLimit / EnforcedPowerLimit (milliwatts),
nvmlDeviceGetPersistenceMode, nvmlDeviceGetNvLinkState(h, link), nvmlEventSetCreate, nvmlDeviceRegisterEvents,
nvmlEventSetWait (delivers each GPU's ``xid_events`` once, then raises NVMLError_Timeout), nvmlEventSetFree,
and the constants and NVMLError classes those use (NVMLError(code) returns the matching subclass).
Anything else raises AttributeError, so a check calling an unimplemented function is noticed in tests.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

# Constants (values from nvidia-ml-py's pynvml.py).
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

_ERROR_NAMES = {
    NVML_ERROR_UNINITIALIZED: ("Uninitialized", "Uninitialized"),
    NVML_ERROR_INVALID_ARGUMENT: ("InvalidArgument", "Invalid Argument"),
    NVML_ERROR_NOT_SUPPORTED: ("NotSupported", "Not Supported"),
    NVML_ERROR_NO_PERMISSION: ("NoPermission", "Insufficient Permissions"),
    NVML_ERROR_NOT_FOUND: ("NotFound", "Not Found"),
    NVML_ERROR_DRIVER_NOT_LOADED: ("DriverNotLoaded", "Driver Not Loaded"),
    NVML_ERROR_TIMEOUT: ("Timeout", "Timeout"),
    NVML_ERROR_LIBRARY_NOT_FOUND: ("LibraryNotFound", "NVML Shared Library Not Found"),
    NVML_ERROR_FUNCTION_NOT_FOUND: ("FunctionNotFound", "Function Not Found"),
    NVML_ERROR_GPU_IS_LOST: ("GpuIsLost", "GPU is lost"),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: ("LibRmVersionMismatch", "RM has detected an NVML/RM version mismatch."),
    NVML_ERROR_UNKNOWN: ("Unknown", "Unknown Error"),
}

CONSTANTS = dict(
    NVML_FEATURE_DISABLED=0, NVML_FEATURE_ENABLED=1,
    NVML_TEMPERATURE_GPU=0, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN=0, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1,
    NVML_COMPUTEMODE_DEFAULT=0, NVML_COMPUTEMODE_EXCLUSIVE_THREAD=1, NVML_COMPUTEMODE_PROHIBITED=2,
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS=3,
    NVML_MEMORY_ERROR_TYPE_CORRECTED=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
    NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1,
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
    NVML_DEVICE_MIG_DISABLE=0, NVML_DEVICE_MIG_ENABLE=1,
    NVML_NVLINK_MAX_LINKS=18,  # the real module says 36 in 13.x; the checks must not depend on the exact value
    nvmlEventTypeXidCriticalError=0x8,
    nvmlClocksEventReasonGpuIdle=0x1, nvmlClocksEventReasonApplicationsClocksSetting=0x2,
    nvmlClocksEventReasonSwPowerCap=0x4, nvmlClocksEventReasonHwSlowdown=0x8, nvmlClocksEventReasonSyncBoost=0x10,
    nvmlClocksEventReasonSwThermalSlowdown=0x20, nvmlClocksEventReasonHwThermalSlowdown=0x40,
    nvmlClocksEventReasonHwPowerBrakeSlowdown=0x80, nvmlClocksEventReasonDisplayClockSetting=0x100,
    nvmlClocksThrottleReasonGpuIdle=0x1, nvmlClocksThrottleReasonSwPowerCap=0x4,
    nvmlClocksThrottleReasonHwSlowdown=0x8, nvmlClocksThrottleReasonSwThermalSlowdown=0x20,
    nvmlClocksThrottleReasonHwThermalSlowdown=0x40, nvmlClocksThrottleReasonHwPowerBrakeSlowdown=0x80,
)
globals().update(CONSTANTS)
IDLE = 0x1
HW_SLOWDOWN = 0x8
HW_THERMAL = 0x40
SW_THERMAL = 0x20


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(code)`` returns the subclass for that code, ``.value`` is the code."""

    _by_code: dict[int, type] = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _ERROR_NAMES.get(self.value, ("", f"NVML Error with code {self.value}"))[1]


ERROR_CLASSES = {}
for _code, (_name, _text) in _ERROR_NAMES.items():
    _cls = type(f"NVMLError_{_name}", (NVMLError,), {})
    NVMLError._by_code[_code] = _cls
    ERROR_CLASSES[f"NVMLError_{_name}"] = _cls
globals().update(ERROR_CLASSES)


@dataclass
class FakeGpu:
    """One device; every field is what NVML answers. ``None`` (or the call's name in ``unsupported``) = NotSupported."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:18:00.0"
    memory_total: int = 85_520_809_984
    memory_used: int = 567_279_616
    ecc_mode: tuple | None = (1, 1)  # (current, pending)
    ecc_uncorrected_volatile: int = 0
    ecc_uncorrected_aggregate: int = 0
    ecc_corrected_volatile: int = 0
    remapped_rows: tuple | None = (0, 0, 0, 0)  # (correctable, uncorrectable, pending, failure)
    retired_pages: dict | None = field(default_factory=lambda: {0: [], 1: []})  # cause -> page addresses
    retired_pending: int | None = 0
    compute_mode: int = 0
    mig_mode: tuple | None = (0, 0)
    mig_devices: list = field(default_factory=list)  # MIG instance UUIDs ("MIG-...")
    processes: list = field(default_factory=list)  # [(pid, used_bytes)]
    temperature: int | None = 34
    slowdown_temp: int | None = 87
    clock_reasons: int | None = IDLE
    pcie: tuple | None = (5, 5, 16, 16)  # (current gen, max gen, current width, max width)
    power_limit_mw: int | None = 700_000
    power_default_mw: int | None = 700_000
    power_enforced_mw: int | None = 700_000
    persistence: int | None = 1
    nvlink: list | None = None  # per-link state 1/0; None = no NVLink (NotSupported on link 0)
    xid_events: list = field(default_factory=list)  # Xid numbers nvmlEventSetWait delivers during the check
    unsupported: set = field(default_factory=set)
    lost: bool = False  # every per-device call raises NVMLError_GpuIsLost


@dataclass
class _State:
    gpus: list
    driver_version: str
    cuda_driver_version: int
    init_error: int | None = None
    init_count: int = 0
    shutdown_count: int = 0
    calls: list = field(default_factory=list)
    event_sets: dict = field(default_factory=dict)


class _Handle:
    def __init__(self, index: int, mig: int | None = None):
        self.index, self.mig = index, mig

    def __repr__(self):
        return f"<fake nvmlDevice {self.index}{'' if self.mig is None else f'/mig{self.mig}'}>"


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _raise(code: int):
    raise NVMLError(code)


def _build(state: _State) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    mod.__file__ = __file__
    mod.__dict__.update(CONSTANTS)
    mod.__dict__.update(ERROR_CLASSES)
    mod.NVMLError = NVMLError
    mod.state = state
    for name, value in globals().items():
        if name.startswith("NVML_ERROR_") or name == "NVML_SUCCESS":
            setattr(mod, name, value)

    def api(fn):
        """Register ``fn`` as a module function that counts calls and refuses work before nvmlInit."""
        def wrapper(*args):
            state.calls.append(fn.__name__)
            if fn.__name__ not in ("nvmlInit", "nvmlShutdown") and state.init_count <= state.shutdown_count:
                _raise(NVML_ERROR_UNINITIALIZED)
            return fn(*args)
        wrapper.__name__ = fn.__name__
        setattr(mod, fn.__name__, wrapper)
        return fn

    def dev(handle: _Handle, call: str, value: Any = ...):
        """The device behind a handle; NotSupported if ``call`` is marked so or ``value`` is None."""
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(state.gpus):
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        gpu = state.gpus[handle.index]
        if gpu.lost:
            _raise(NVML_ERROR_GPU_IS_LOST)
        if call in gpu.unsupported:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def need(value):
        if value is None:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        return value

    @api
    def nvmlInit():
        if state.init_error is not None:
            _raise(state.init_error)
        state.init_count += 1

    @api
    def nvmlShutdown():
        if state.init_count <= state.shutdown_count:
            _raise(NVML_ERROR_UNINITIALIZED)
        state.shutdown_count += 1

    @api
    def nvmlSystemGetDriverVersion():
        return state.driver_version

    @api
    def nvmlSystemGetCudaDriverVersion():
        return state.cuda_driver_version

    @api
    def nvmlSystemGetCudaDriverVersion_v2():
        return state.cuda_driver_version

    @api
    def nvmlDeviceGetCount():
        return len(state.gpus)

    @api
    def nvmlDeviceGetHandleByIndex(index):
        if not 0 <= int(index) < len(state.gpus):
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(int(index))

    @api
    def nvmlDeviceGetIndex(h):
        dev(h, "nvmlDeviceGetIndex")
        return h.index

    @api
    def nvmlDeviceGetName(h):
        return dev(h, "nvmlDeviceGetName").name

    @api
    def nvmlDeviceGetUUID(h):
        g = dev(h, "nvmlDeviceGetUUID")
        return g.uuid if h.mig is None else g.mig_devices[h.mig]

    @api
    def nvmlDeviceGetPciInfo(h):
        g = dev(h, "nvmlDeviceGetPciInfo")
        return _Obj(busId=g.pci_bus_id.encode(), busIdLegacy=g.pci_bus_id.encode())

    @api
    def nvmlDeviceGetMemoryInfo(h, version=None):
        g = dev(h, "nvmlDeviceGetMemoryInfo")
        return _Obj(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    @api
    def nvmlDeviceGetEccMode(h):
        return list(need(dev(h, "nvmlDeviceGetEccMode").ecc_mode))

    @api
    def nvmlDeviceGetTotalEccErrors(h, error_type, counter_type):
        g = dev(h, "nvmlDeviceGetTotalEccErrors")
        need(g.ecc_mode)
        if error_type == CONSTANTS["NVML_MEMORY_ERROR_TYPE_CORRECTED"]:
            return g.ecc_corrected_volatile
        if counter_type == CONSTANTS["NVML_VOLATILE_ECC"]:
            return g.ecc_uncorrected_volatile
        return g.ecc_uncorrected_aggregate

    @api
    def nvmlDeviceGetRemappedRows(h):
        return tuple(need(dev(h, "nvmlDeviceGetRemappedRows").remapped_rows))

    @api
    def nvmlDeviceGetRetiredPages(h, cause):
        return list(need(dev(h, "nvmlDeviceGetRetiredPages").retired_pages).get(cause, []))

    @api
    def nvmlDeviceGetRetiredPagesPendingStatus(h):
        return need(dev(h, "nvmlDeviceGetRetiredPagesPendingStatus").retired_pending)

    @api
    def nvmlDeviceGetComputeMode(h):
        return dev(h, "nvmlDeviceGetComputeMode").compute_mode

    @api
    def nvmlDeviceGetMigMode(h):
        return list(need(dev(h, "nvmlDeviceGetMigMode").mig_mode))

    @api
    def nvmlDeviceGetMaxMigDeviceCount(h):
        g = dev(h, "nvmlDeviceGetMaxMigDeviceCount")
        return 7 if g.mig_mode else 0

    @api
    def nvmlDeviceGetMigDeviceHandleByIndex(h, i):
        g = dev(h, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not 0 <= i < len(g.mig_devices):
            _raise(NVML_ERROR_NOT_FOUND)
        return _Handle(h.index, i)

    @api
    def nvmlDeviceGetComputeRunningProcesses(h):
        g = dev(h, "nvmlDeviceGetComputeRunningProcesses")
        return [_Obj(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for pid, used in g.processes]

    @api
    def nvmlDeviceGetTemperature(h, sensor):
        return need(dev(h, "nvmlDeviceGetTemperature").temperature)

    @api
    def nvmlDeviceGetTemperatureThreshold(h, kind):
        return need(dev(h, "nvmlDeviceGetTemperatureThreshold").slowdown_temp)

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(h):
        return need(dev(h, "nvmlDeviceGetCurrentClocksEventReasons").clock_reasons)

    @api
    def nvmlDeviceGetCurrentClocksThrottleReasons(h):
        return need(dev(h, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_reasons)

    @api
    def nvmlDeviceGetCurrPcieLinkGeneration(h):
        return need(dev(h, "nvmlDeviceGetCurrPcieLinkGeneration").pcie)[0]

    @api
    def nvmlDeviceGetMaxPcieLinkGeneration(h):
        return need(dev(h, "nvmlDeviceGetMaxPcieLinkGeneration").pcie)[1]

    @api
    def nvmlDeviceGetCurrPcieLinkWidth(h):
        return need(dev(h, "nvmlDeviceGetCurrPcieLinkWidth").pcie)[2]

    @api
    def nvmlDeviceGetMaxPcieLinkWidth(h):
        return need(dev(h, "nvmlDeviceGetMaxPcieLinkWidth").pcie)[3]

    @api
    def nvmlDeviceGetPowerManagementLimit(h):
        return need(dev(h, "nvmlDeviceGetPowerManagementLimit").power_limit_mw)

    @api
    def nvmlDeviceGetPowerManagementDefaultLimit(h):
        return need(dev(h, "nvmlDeviceGetPowerManagementDefaultLimit").power_default_mw)

    @api
    def nvmlDeviceGetEnforcedPowerLimit(h):
        return need(dev(h, "nvmlDeviceGetEnforcedPowerLimit").power_enforced_mw)

    @api
    def nvmlDeviceGetPersistenceMode(h):
        return need(dev(h, "nvmlDeviceGetPersistenceMode").persistence)

    @api
    def nvmlDeviceGetNvLinkState(h, link):
        g = dev(h, "nvmlDeviceGetNvLinkState")
        links = need(g.nvlink)
        if not 0 <= link < len(links):
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    @api
    def nvmlEventSetCreate():
        key = len(state.event_sets) + 1
        state.event_sets[key] = {"handles": [], "pending": None, "freed": False}
        return key

    @api
    def nvmlDeviceRegisterEvents(h, event_types, event_set):
        dev(h, "nvmlDeviceRegisterEvents")
        state.event_sets[event_set]["handles"].append(h)

    @api
    def nvmlEventSetWait(event_set, timeout_ms):
        es = state.event_sets[event_set]
        if es["pending"] is None:  # events "happen" once the check starts waiting
            es["pending"] = [(h, xid) for h in es["handles"] for xid in state.gpus[h.index].xid_events]
        if es["pending"]:
            h, xid = es["pending"].pop(0)
            return _Obj(device=h, eventType=CONSTANTS["nvmlEventTypeXidCriticalError"], eventData=xid,
                        gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
        _raise(NVML_ERROR_TIMEOUT)

    @api
    def nvmlEventSetFree(event_set):
        state.event_sets[event_set]["freed"] = True

    return mod


def make(gpus: list[FakeGpu] | None = None, driver_version: str = "550.54.15",
         cuda_driver_version: int = 12040) -> types.ModuleType:
    """A fake pynvml module with these GPUs (default: ``default_gpus()``)."""
    return _build(_State(gpus=list(default_gpus() if gpus is None else gpus), driver_version=driver_version,
                         cuda_driver_version=cuda_driver_version))


def make_no_driver(code: int = NVML_ERROR_LIBRARY_NOT_FOUND) -> types.ModuleType:
    """A fake pynvml whose nvmlInit fails the way it does on a machine without the NVIDIA driver."""
    return _build(_State(gpus=[], driver_version="", cuda_driver_version=0, init_error=code))


H100_UNSUPPORTED = {"nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetNvLinkState"}


def healthy_gpu(index: int, name: str = "NVIDIA H100 80GB HBM3", **kw) -> FakeGpu:
    """A healthy GPU like the H100 in gpu-baseline-h100.md; ``index`` makes UUID and PCI bus id unique."""
    base = dict(name=name, uuid=f"GPU-{index:08x}-aaaa-bbbb-cccc-{index:012x}",
                pci_bus_id=f"00000000:{0x18 + index * 0x10:02X}:00.0", unsupported=set(H100_UNSUPPORTED))
    base.update(kw)
    return FakeGpu(**base)


def default_gpus() -> list[FakeGpu]:
    """Two H100s: GPU 0 healthy; GPU 1 with 2 volatile uncorrected ECC errors, a pending row remap and its
    PCIe link trained down to gen3 x8 (max gen5 x16) while busy."""
    return [
        healthy_gpu(0),
        healthy_gpu(1, ecc_uncorrected_volatile=2, ecc_uncorrected_aggregate=3, remapped_rows=(0, 1, 1, 0),
                    pcie=(3, 5, 8, 16), clock_reasons=0, temperature=51),
    ]
