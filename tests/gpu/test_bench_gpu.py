"""nccl-bench on real GPUs: NCCL backend, CUDA-event timing, --graph capture, checked data on every op.

Skipped without CUDA (the ``gpu`` marker). Uses every visible GPU (one rank per GPU); assertions are about
checked data and the JSON's agreement with nccl-tests' formulas, not about one machine's figures."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddpdoctor.bench.ops import busbw_gbs

pytestmark = pytest.mark.gpu

ALL = "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,sendrecv"


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def bench(*args):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "nccl-bench", *args], capture_output=True, text=True,
                          timeout=280, env=dict(os.environ))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("graph", [False, True])
def test_nccl_every_op_checked(graph, tmp_path):
    n = _gpus()
    args = ["--backend", "nccl", "--nproc", str(n), "--op", ALL, "-b", "1M", "-e", "16M", "-f", "4",
            "-w", "2", "-n", "5", "--check", "--json", "--output", str(tmp_path)]
    p = bench(*args, *(["--graph"] if graph else []))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["run"]["backend"] == "nccl" and doc["run"]["graph"] is graph and doc["run"]["world_size"] == n
    assert doc["summary"]["wrong"] == 0 and doc["verdict"] == "pass"
    for row in doc["rows"]:
        for form in (f for f in (row["out_of_place"], row["in_place"]) if f is not None):
            assert form["time_us"] > 0 and form["wrong"] == 0, row
            expected = busbw_gbs(row["op"], row["size"], form["time_us"] / 1e6, n)
            assert form["busbw_gbs"] == pytest.approx(expected, rel=2e-3, abs=2e-4)
