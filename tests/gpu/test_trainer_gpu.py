"""run-trainer on real GPUs: the reference trainer on CUDA/NCCL in bf16, one rank per GPU (at most 2).

Skipped without CUDA (the ``gpu`` marker). Assertions are about correctness (loss falls, checksums equal,
peak memory measured on the device, a failure explained), not about one machine's figures; tokens/s is
printed so a run on a GPU machine records it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

GPT_SMALL = ["--n-layer", "4", "--n-head", "4", "--n-embd", "256", "--block-size", "128", "--batch-size", "16",
             "--log-every", "10"]


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_trainer(tmp_path, *args):
    argv = [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir", str(tmp_path), "--json",
            "--nproc-per-node", str(min(_gpus(), 2)), *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=280, env=dict(os.environ),
                       start_new_session=True)
    return p, (json.loads(p.stdout) if p.stdout.strip().startswith("{") else None)


@pytest.fixture(autouse=True)
def _need_cuda():
    if _gpus() < 1:
        pytest.skip("no CUDA device")


@pytest.mark.timeout(300)
def test_reference_trainer_on_cuda_nccl_bf16(tmp_path):
    p, doc = run_trainer(tmp_path, "--", "--steps", "60", *GPT_SMALL)
    assert p.returncode == 0, p.stderr[-3000:]
    assert doc["verdict"] == "pass" and doc["checksums_equal"] is True
    s = doc["metrics_summary"]
    assert s["final_loss"] < s["first_loss"]
    last = doc["metrics"]["0"][-1]
    assert last["peak_mem_bytes"] > 0  # measured with torch.cuda.max_memory_allocated: the run was on the GPU
    log = next(Path(doc["logs"]).glob("*/attempt_0/0/stdout.log")).read_text()
    assert "cuda" in log
    print(f"\nGPU reference trainer: {s.get('tokens_per_s_mean')} tokens/s over {s.get('ranks')} rank(s)")


@pytest.mark.timeout(300)
def test_exception_on_gpu_is_explained(tmp_path):
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs for a victim rank")
    p, doc = run_trainer(tmp_path, "--", "--steps", "30", "--fail-at-step", "10", "--fail-rank", "1", *GPT_SMALL)
    assert p.returncode != 0
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["category"] == "exception" and rc["location"]
    assert {c["rank"] for c in doc["consequences"]} == {0}
