"""torch-build: Python and the torch build this node runs (CUDA/ROCm/CPU, CUDA runtime, cuDNN, NCCL, which
torch.distributed backends exist), judged against the hardware present. torch failing to import is a
clear fail of this check alone; the other checks still run."""
from __future__ import annotations

import os
import platform
import re
import sys
from shlex import quote

from ddpdoctor.api import Check, Option, parse_int, passed_if_quiet, per_node, torch_damage

# An NVIDIA driver leaves these behind; a cheap way to know GPUs exist without asking NVML (the gpu check does).
NVIDIA_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidia0")
# Facts that differ per node by nature (where things are installed, how long gathering took): not compared.
NOT_COMPARED = ("path", "file", "executable", "prefix", "dir", "seconds", "error")
DAMAGED = "not imported: "  # torch_error's start when a library of torch's is truncated (shared_libs.torch_damage)
CPU_WHEEL_FIX = ("pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu126 "
                 "(pick the CUDA version your driver supports: nvidia-smi shows it)")


def _pip(facts: dict) -> str:
    """The install that mends it: a damaged torch (a truncated library) is installed, and `pip install` keeps it."""
    return "pip install --force-reinstall torch" if str(facts.get("torch_error")).startswith(DAMAGED) else "pip install torch"


def _nccl_version(torch) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - CPU builds raise here; absence is the fact
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    return str(v) if v else None


def _torch_facts() -> dict:
    import torch
    import torch.distributed as dist

    cuda = torch.version.cuda
    hip = getattr(torch.version, "hip", None)
    available = dist.is_available()
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version() if (cuda or hip) else None
    except Exception:  # noqa: BLE001
        cudnn = None
    return {
        "torch_version": torch.__version__,
        "torch_build": "cuda" if cuda else "rocm" if hip else "cpu",
        "cuda_runtime": cuda,
        "hip_runtime": hip,
        "cudnn_version": cudnn,
        "nccl_version": _nccl_version(torch) if (cuda or hip) else None,
        "distributed_available": available,
        "gloo_available": bool(available and dist.is_gloo_available()),
        "nccl_available": bool(available and dist.is_nccl_available()),
        "mpi_available": bool(available and dist.is_mpi_available()),
        "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False)),
        "torch_path": os.path.dirname(torch.__file__),
        "nccl_backend": _nccl_backend(dist) if available else None,
    }


def _nccl_backend(dist) -> str:
    """What "nccl" builds: torch 2.15 registers ProcessGroupNCCL2 (torchcomms) under it unless
    TORCH_DIST_USE_NCCL2=0, and marks a legacy "nccl" as self-recording (distributed_c10d.py
    `_register_builtin_nccl_backend`); 2.13/2.14 have only ProcessGroupNCCL."""
    c10d = getattr(dist, "distributed_c10d", None)
    if c10d is None or not hasattr(c10d, "_create_nccl2_process_group"):
        return "ProcessGroupNCCL"
    recording = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", set())
    return "ProcessGroupNCCL" if "nccl" in recording else "ProcessGroupNCCL2"


class TorchBuildCheck(Check):
    name = "torch-build"
    imports = ("torch",)
    cross_node = True  # in the prologs' meeting: its comparables (torch, CUDA, NCCL) are what parity compares there
    description = "Python, torch version and build (CUDA/ROCm/CPU), CUDA runtime, cuDNN, NCCL, gloo/NCCL backends"
    timeout_s = 90.0  # a cold `import torch` on network storage can take a minute
    options = {
        "torch_version": Option("", "require exactly this torch version (e.g. 2.13.0); empty: any"),
        "min_python": Option("3.9", "oldest Python accepted"),
    }

    def gather(self, ctx) -> dict:
        facts = {
            "python_version": platform.python_version(),
            "python_implementation": platform.python_implementation(),
            "python_executable": sys.executable,
            "nvidia_driver_present": any(os.path.exists(p) for p in NVIDIA_MARKERS),
            "torch_error": None,
        }
        damage = torch_damage()  # importing a truncated library kills this whole process (SIGBUS): say it instead
        if damage:
            facts["torch_error"] = f"{DAMAGED}{damage}"
            return facts
        try:
            facts.update(_torch_facts())
        except Exception as exc:  # noqa: BLE001 - a broken torch is this check's finding, not a crash
            facts["torch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return facts

    def exports(self, facts: dict) -> dict:
        if not facts:
            return {}
        cuda = facts.get("cuda_runtime") or (f"ROCm {facts['hip_runtime']}" if facts.get("hip_runtime") else None)
        if not cuda and facts.get("torch_build") == "cpu":
            cuda = "none (cpu build)"
        return {"versions": {"python": facts.get("python_version"), "torch": facts.get("torch_version"),
                             "cuda": cuda, "nccl": facts.get("nccl_version")}}

    def comparable(self, facts: dict) -> dict:
        return {k: v for k, v in facts.items() if isinstance(v, (str, int, float, bool))
                and not any(s in k.lower() for s in NOT_COMPARED)}

    def compare(self, facts_by_node, opts):
        return per_node(facts_by_node, lambda node, f: self.judge(node, f, opts))

    def judge(self, node: str, f: dict, opts) -> list:
        out = []
        if _version_tuple(f.get("python_version")) < _version_tuple(opts["min_python"]):
            out.append(self.fail(f"Python {f.get('python_version')} is older than {opts['min_python']}", [node],
                                 actual=f.get("python_version"), expected=f">= {opts['min_python']}",
                                 fix="use a newer Python (a venv or conda env) for the job"))
        if f.get("torch_error"):
            said = str(f["torch_error"]).removeprefix(DAMAGED)  # the marker chose the fix; the sentence needs it not
            out.append(self.fail(f"torch does not import: {said}", [node], actual=f["torch_error"],
                                 expected="import torch succeeds",
                                 fix=f"{quote(str(f.get('python_executable') or 'python3'))} -m {_pip(f)} "
                                     "(in the environment the job runs in)"))
            return out
        want = opts["torch_version"]
        have = str(f.get("torch_version"))
        if want and have.split("+")[0] != want.split("+")[0]:
            out.append(self.fail(f"torch {have} installed, {want} required", [node], actual=have, expected=want,
                                 fix=f"pip install {quote('torch==' + str(want))}"))
        if not f.get("gloo_available"):
            out.append(self.fail("torch.distributed has no gloo backend", [node], actual="gloo missing",
                                 expected="gloo available",
                                 fix="install an official torch wheel (pip install --force-reinstall torch); "
                                     "builds without USE_DISTRIBUTED cannot run DDP"))
        build = f.get("torch_build")
        if build == "cpu" and f.get("nvidia_driver_present"):
            out.append(self.fail("torch is a CPU-only build but this node has an NVIDIA driver: DDP would train on CPU",
                                 [node], actual=f"torch {have} (cpu)", expected="a CUDA build of torch",
                                 fix=CPU_WHEEL_FIX))
        if build in ("cuda", "rocm") and not f.get("nccl_available"):
            out.append(self.fail(f"torch {have} is a {build} build without NCCL/RCCL", [node],
                                 actual="nccl missing", expected="nccl available",
                                 fix="install the official torch wheel for your CUDA/ROCm version"))
        parts = [f"torch {have} ({build}"
                 + (f", CUDA {f['cuda_runtime']}" if f.get("cuda_runtime") else "")
                 + (f", ROCm {f['hip_runtime']}" if f.get("hip_runtime") else "")
                 + (f", NCCL {f['nccl_version']}" if f.get("nccl_version") else "") + ")",
                 f"Python {f.get('python_version')}",
                 "backends: " + ",".join(b for b in ("gloo", "nccl", "mpi") if f.get(f"{b}_available"))
                 + (f" (nccl = {f['nccl_backend']})" if f.get("nccl_available") and f.get("nccl_backend") else "")]
        return passed_if_quiet(out, self, [node], "; ".join(parts), actual=have)


def _version_tuple(text: str | None) -> tuple[int, ...]:
    nums = []
    for part in str(text or "0").split("."):
        number = parse_int(re.match(r"[0-9]*", part).group())  # '2', '13', '0+cu121' -> 0; '²' stops it
        if number is None:
            break
        nums.append(number)
    return tuple(nums) or (0,)
