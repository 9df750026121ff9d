"""nccl-bench leaves none of its temp files behind (the result file, the launch config, progress notes and
per-rank logs), whether the run passes, finds wrong data, loses a rank, or stops at a usage error."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def bench(tmp_path, *args, env=None):
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor", "nccl-bench", "--backend", "gloo", "-b", "1K", "-e", "1K",
                           "-w", "1", "-n", "2", "--timeout", "30", *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "TMPDIR": str(scratch), **(env or {})})
    return proc, sorted(p.name for p in scratch.iterdir() if p.name.startswith("ddpdoctor-"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("env, code", [
    ({}, 0),
    ({"DDPDOCTOR_BENCH_TEST_CORRUPT_RANK": "1"}, 1),
    ({"DDPDOCTOR_BENCH_TEST_DIE_RANK": "1", "DDPDOCTOR_BENCH_TEST_DIE_AT_BYTES": "1024"}, 1),
], ids=["pass", "wrong-data", "rank-dies"])
def test_no_temp_dir_outlives_the_run(tmp_path, env, code):
    proc, left = bench(tmp_path, env=env)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert left == []


@pytest.mark.timeout(120)
def test_no_temp_dir_after_a_usage_error(tmp_path):
    proc, left = bench(tmp_path, "--localise-size", "1T")
    assert proc.returncode == 2 and "--localise-size" in proc.stderr
    assert left == []
