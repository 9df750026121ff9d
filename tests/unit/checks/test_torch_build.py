"""Unit tests of checks/torch_build.py."""
from __future__ import annotations

import builtins
import json

from ddpdoctor_checks import (
    torch_build,
)

from ddpdoctor.api import Level
from tests.unit.helpers import ctx, only

# ---------------------------------------------------------------- torch-build
TORCH_OK = {"python_version": "3.11.7", "python_executable": "/usr/bin/python3", "nvidia_driver_present": False,
            "torch_error": None, "torch_version": "2.13.0+cpu", "torch_build": "cpu", "cuda_runtime": None,
            "hip_runtime": None, "nccl_version": None, "gloo_available": True, "nccl_available": False,
            "mpi_available": False}


def judge_torch(facts, **opts):
    return torch_build.TorchBuildCheck().compare({"n1": facts}, torch_build.TorchBuildCheck().with_defaults({"min_python": "3.9", "torch_version": "", **opts}))


def test_torch_build_gathers_real_torch():
    facts = torch_build.TorchBuildCheck().gather(ctx())
    import torch

    assert facts["torch_version"] == torch.__version__
    assert facts["gloo_available"] is True
    assert facts["torch_build"] in ("cpu", "cuda", "rocm")
    json.dumps(facts)


def test_torch_import_failure_is_a_fail_with_a_fix(monkeypatch):
    real_import = builtins.__import__

    def broken(name, *a, **kw):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("libtorch_cpu.so: cannot open shared object file")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", broken)
    facts = torch_build.TorchBuildCheck().gather(ctx())
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert "libtorch_cpu.so" in facts["torch_error"]
    (r,) = judge_torch(facts)
    assert r.level is Level.FAIL and "does not import" in r.summary and "pip install torch" in r.fix


def test_torch_build_passes_and_names_the_build():
    (r,) = judge_torch(TORCH_OK)
    assert r.level is Level.PASS and "2.13.0+cpu" in r.summary and "gloo" in r.summary


def test_cpu_torch_on_a_gpu_node_fails():
    res = judge_torch(dict(TORCH_OK, nvidia_driver_present=True))
    (r,) = only(res, Level.FAIL)
    assert "CPU-only" in r.summary and "download.pytorch.org" in r.fix


def test_missing_gloo_and_nccl_fail():
    res = judge_torch(dict(TORCH_OK, gloo_available=False, torch_build="cuda", cuda_runtime="12.6"))
    summaries = " | ".join(r.summary for r in only(res, Level.FAIL))
    assert "gloo" in summaries and "NCCL" in summaries


def test_required_torch_version_and_old_python():
    res = judge_torch(dict(TORCH_OK, python_version="3.8.10"), torch_version="2.4.0")
    fails = only(res, Level.FAIL)
    assert any("3.8.10" in r.summary for r in fails)
    assert any(r.fix == "pip install torch==2.4.0" for r in fails)
    assert only(judge_torch(TORCH_OK, torch_version="2.13.0"), Level.PASS)


def test_the_line_names_what_nccl_builds():
    """torch 2.15's "nccl" is ProcessGroupNCCL2 (torchcomms) unless TORCH_DIST_USE_NCCL2=0; the line says which."""
    cuda = dict(TORCH_OK, torch_version="2.15.0+cu132", torch_build="cuda", cuda_runtime="13.2", nccl_available=True)
    (r,) = judge_torch(dict(cuda, nccl_backend="ProcessGroupNCCL2"))
    assert "backends: gloo,nccl (nccl = ProcessGroupNCCL2)" in r.summary
    (r,) = judge_torch(TORCH_OK)
    assert "nccl =" not in r.summary  # no NCCL, nothing to say


def test_the_nccl_backend_of_this_torch():
    import torch.distributed as dist

    got = torch_build._nccl_backend(dist)
    has_nccl2 = hasattr(dist.distributed_c10d, "_create_nccl2_process_group")
    assert got == ("ProcessGroupNCCL2" if has_nccl2 and "nccl" not in dist.distributed_c10d._FR_SELF_RECORDING_BACKENDS
                   else "ProcessGroupNCCL")


def test_a_truncated_library_of_torchs_is_a_fail_without_importing_it(monkeypatch):
    """Importing a truncated library kills the health check itself (SIGBUS): the check reads it first."""
    real_import = builtins.__import__
    tried = []

    def recording(name, *a, **kw):
        if name == "torch" or name.startswith("torch."):
            tried.append(name)
        return real_import(name, *a, **kw)

    monkeypatch.setattr(torch_build, "torch_damage", lambda: "libtorch_cpu.so is truncated: 4,194,304 "
                        "of the 434,184,800 bytes its ELF header says (/x/torch/lib/libtorch_cpu.so)")
    monkeypatch.setattr(builtins, "__import__", recording)
    facts = torch_build.TorchBuildCheck().gather(ctx())
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert tried == [] and facts["torch_error"].startswith("not imported: libtorch_cpu.so is truncated")
    (r,) = judge_torch(facts)
    assert r.level is Level.FAIL and r.summary.startswith("torch does not import: libtorch_cpu.so is truncated")
    assert "pip install --force-reinstall torch" in r.fix, r.fix  # `pip install torch` keeps the damaged one


def test_a_node_whose_torch_has_a_truncated_library_gets_its_record_not_a_crash(truncated_torch):
    """The checks' imports come first (runner.Imports): a truncated library is not loaded (SIGBUS killed the whole
    preflight, the unattended health check with it: no record, no drain); torch-build fails naming it."""
    from tests.unit.helpers import run_process

    p = run_process("preflight", "--only", "torch-build", "--json", "--no-save", env={"PYTHONPATH": truncated_torch},
                    timeout=60)
    assert p.returncode > 0, (p.returncode, p.stderr[-2000:])
    (r,) = [r for r in json.loads(p.stdout)["results"] if r["check"] == "torch-build"]
    assert r["level"] == "fail" and "libtruncated.so is truncated" in r["summary"], r
