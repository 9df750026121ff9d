"""The reference trainer's cross-rank parameter check: rounding apart is recorded, a rank out of sync raises on
every rank (two real gloo ranks, forked after one torch import)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

JOB = textwrap.dedent("""
    import json, os, sys, tempfile
    from pathlib import Path
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    sys.path.insert(0, {root!r})
    from reference_trainer import train

    def rank_main(rank, run_dir, noise, store):
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 64)
        with torch.no_grad():
            model.bias[0] = 0.0
            if rank == 1:
                model.weight.mul_(1 + noise)
                model.bias[0] = 1e-8  # 0 on rank 0: Adam's step on a gradient rounded to 1e-12 instead of 0
        try:
            train.compare_checksums(model, 7, rank, 2, True, torch.device("cpu"), Path(run_dir))
            outcome = "ok"
        except RuntimeError as e:
            outcome = str(e)
        Path(run_dir, f"outcome{{rank}}").write_text(outcome)
        dist.destroy_process_group()

    if __name__ == "__main__":
        run_dir, noise = sys.argv[1], float(sys.argv[2])
        mp.start_processes(rank_main, args=(run_dir, noise, run_dir + "/store"), nprocs=2, start_method="fork")
""")


def run(tmp_path: Path, noise: float) -> tuple[dict, list[str]]:
    script = tmp_path / "job.py"
    script.write_text(JOB.format(root=str(ROOT)))
    p = subprocess.run([sys.executable, str(script), str(tmp_path), repr(noise)], capture_output=True, text=True,
                       timeout=100)
    assert p.returncode == 0, p.stderr[-3000:]
    row = json.loads((tmp_path / "checksums.jsonl").read_text().splitlines()[-1])
    return row, [(tmp_path / f"outcome{r}").read_text() for r in (0, 1)]


@pytest.mark.timeout(120)
def test_rounding_apart_is_recorded_and_a_rank_out_of_sync_raises_everywhere(tmp_path):
    (tmp_path / "a").mkdir()
    row, outcomes = run(tmp_path / "a", 1e-6)  # a few float32 ulps: what another kernel path gives
    assert row["bitwise"] is False and row["equal"] is True and 0 < row["max_rel_diff"] < 1e-5, row
    assert outcomes == ["ok", "ok"]
    (tmp_path / "b").mkdir()
    row, outcomes = run(tmp_path / "b", 0.01)  # a rank that trained on something else: 1% off
    assert row["equal"] is False and row["max_rel_diff"] > 1e-3, row
    assert all("parameters differ across ranks at step 7 (odd rank(s)" in o for o in outcomes), outcomes
