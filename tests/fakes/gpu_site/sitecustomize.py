"""Fake GPUs for a real node process: with this directory and the repository root on PYTHONPATH and
DDPDOCTOR_TEST_FAKE_GPUS=N in its environment, a `ddpdoctor preflight` process sees N healthy GPUs through the
fake NVML of tests/fakes/fake_nvml.py, and torch (as the gpu check asks it) sees as many. Cluster tests with
real processes use it to give each node its own GPU count (heterogeneous nodes) on a machine without GPUs.

Python imports ``sitecustomize`` at start-up from the path; without the variable this does nothing.
"""
import os
import sys

_count = os.environ.get("DDPDOCTOR_TEST_FAKE_GPUS")
if _count is not None:
    from tests.fakes import fake_nvml

    sys.modules["pynvml"] = fake_nvml.make(gpus=[fake_nvml.healthy_gpu(i) for i in range(int(_count))])

    import ddpdoctor_checks.gpu as _gpu

    def _torch_view(n=int(_count)):
        return {"torch_version": "2.13.0+cu124", "torch_cuda_version": "12.4", "torch_device_count": n,
                "torch_error": None}

    _gpu.torch_view = _torch_view
