"""Shared test plumbing: the `slow` marker, one worker for the tests that share a module fixture, and markers
that skip where the machine lacks a GPU, root/netns or a browser.

`slow` (the fast loop is `python3 -m pytest -q -m "not slow"`): a test that starts a cluster of real processes
(preflight nodes, torchrun and its ranks, nccl-bench ranks), a fresh interpreter that imports torch to do work,
or a browser; or a fuzz that builds the whole report thousands of times. Every test under the directories in
SLOW_DIRS is one of those, so they are marked here by where they live (pytest_itemcollected, before `-m`
selects); a test elsewhere that is one says so itself with `@pytest.mark.slow`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Commands save their results under ./ddpdoctor-results by default; tests run from the checkout, so nothing they
# start (in-process or a subprocess, which inherits this) keeps a file there unless a test asks for it.
os.environ.setdefault("DDPDOCTOR_NO_SAVE", "1")
# The node check carries a count of records it could not keep in /run/ddpdoctor (unattended/unkept.py): the tests'
# node checks carry theirs in a folder of the session's, never the machine's.
os.environ.setdefault("DDPDOCTOR_STATE_DIR", tempfile.mkdtemp(prefix="ddpdoctor-state-"))

pytest_plugins = ["tests.xdist_groups"]  # which tests stay together on one worker (--dist loadgroup)

TESTS = Path(__file__).resolve().parent
SLOW_DIRS = ("integration", "gpu", "browser")
CODE_DIRS = ("ddpdoctor", "checks", "reference_trainer", "tests")

# Bytecode: an environment that sets PYTHONDONTWRITEBYTECODE=1 (this project's CI image does) makes every process
# the tests start compile the checkout's sources again, which an editable install never precompiles: 0.3-0.4 CPU-s
# for each preflight node, rank, agent and command, hundreds of them. The checkout is compiled once before the
# tests (pytest_configure), and the processes may write what is still missing.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled it already
    import compileall

    for name in CODE_DIRS:
        compileall.compile_dir(str(TESTS.parent / name), quiet=1, workers=1)


def pytest_itemcollected(item):
    try:
        top = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return
    if top in SLOW_DIRS:
        item.add_marker(pytest.mark.slow)

def _cuda_available() -> bool:
    """ddpdoctor.devices.cuda_available, asked in a subprocess: the test process itself never imports torch."""
    try:
        out = subprocess.run([sys.executable, "-c", "import torch;print(torch.cuda.is_available())"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip().endswith("True")
    except Exception:  # noqa: BLE001
        return False


def _can_netns() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("iptables") is not None


@pytest.hookimpl(trylast=True)  # after `-m` deselected: `-m "not slow"` never asks a subprocess about CUDA
def pytest_collection_modifyitems(config, items):
    need_gpu = any("gpu" in item.keywords for item in items)
    has_gpu = _cuda_available() if need_gpu else False
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA"))
        if "netns" in item.keywords and not _can_netns():
            item.add_marker(pytest.mark.skip(reason="needs root, iproute2 and iptables for network namespaces"))
        if "slurm" in item.keywords:
            from tests.slurm_cluster import unavailable

            why = unavailable()
            if why:
                item.add_marker(pytest.mark.skip(reason=f"a real SLURM cluster {why}"))
        if "browser" in item.keywords and not (shutil.which("chromium") or os.path.exists("/usr/bin/chromium")):
            item.add_marker(pytest.mark.skip(reason="needs Debian's chromium"))


@pytest.fixture
def broken_torch(tmp_path) -> str:
    """A directory to put first on a node's PYTHONPATH: its `torch` raises on import, as a missing shared library
    makes it (tests of a node whose torch does not import)."""
    pkg = tmp_path / "broken" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        'raise ImportError("libtorch_cpu.so: cannot open shared object file: No such file or directory")\n')
    return str(pkg.parent)


@pytest.fixture
def truncated_torch(tmp_path) -> str:
    """A directory to put first on a node's PYTHONPATH: its `torch` loads torch/lib/libtruncated.so, the first quarter
    of a real shared library of torch's (a library truncated in place: loading it kills the process with SIGBUS,
    not an ImportError)."""
    import torch

    real = Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so"
    lib = tmp_path / "truncated" / "torch" / "lib"
    lib.mkdir(parents=True)
    body = real.read_bytes()
    (lib / "libtruncated.so").write_bytes(body[: len(body) // 4])  # within its first page: SIGBUS (measured)
    (lib.parent / "__init__.py").write_text(
        "import ctypes, os\nctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', 'libtruncated.so'))\n")
    return str(lib.parent.parent)
