"""nccl-bench end to end on gloo: real ranks started by torch's elastic launcher, checked data, JSON rows
consistent with nccl-tests' formulas, corruption and a dying rank, bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ddpdoctor.bench.ops import OPS, busbw_gbs

ALL = "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,sendrecv"


def bench(*args, env=None, timeout=240, cwd=None):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "nccl-bench", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


def saving_env(**extra) -> dict:
    """The environment of a run that keeps its result where a user's would (no workflow id of ours set)."""
    base = {k: v for k, v in os.environ.items() if k not in ("DDPDOCTOR_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID")}
    return {**base, "DDPDOCTOR_NO_SAVE": "", **extra}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [2, 3])
def test_every_op_checked_and_consistent(nproc, tmp_path):
    """Every op at 2 and 3 ranks. With 2, the result is kept where a user's is (no --output): under the
    workflow's run id, not torch's rendezvous id (below); with 3, in --output's directory."""
    where = ["--output", str(tmp_path)] if nproc == 3 else []
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "nccl-bench", "--backend", "gloo", "--nproc", str(nproc),
                        "--op", ALL, "-b", "4K", "-e", "64K", "-f", "4", "-w", "1", "-n", "3", "--json", *where],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path,
                       env=saving_env() if nproc == 2 else {**os.environ})
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["kind"] == "nccl-bench" and doc["verdict"] == "pass" and doc["summary"]["wrong"] == 0
    assert doc["run"]["world_size"] == nproc and len(doc["hosts"]) == nproc
    seen = {r["op"] for r in doc["rows"]}
    assert seen == set(ALL.split(","))
    for r in doc["rows"]:
        op = OPS[r["op"]]
        for form in ("out_of_place", "in_place"):
            f = r[form]
            if form not in op.forms:
                assert f is None, r
                continue
            assert f["wrong"] == 0, r
            t = f["time_us"] / 1e6
            assert f["algbw_gbs"] == pytest.approx(r["size"] / t / 1e9, rel=2e-3, abs=2e-4)
            assert f["busbw_gbs"] == pytest.approx(busbw_gbs(r["op"], r["size"], t, nproc), rel=2e-3, abs=2e-4)
            assert f["time_us_max"] >= f["time_us"] * 0.999
        assert r["size"] == op.bytes_moved(r["count"], 4, nproc)
    if nproc == 3:
        assert (tmp_path / "nccl-bench.json").exists()
    else:
        _assert_kept_under_the_workflows_run_id(tmp_path, p)


def _assert_kept_under_the_workflows_run_id(cwd, p) -> None:
    """The ranks run under torch's launcher, whose TORCHELASTIC_RUN_ID ('ddpdoctor-bench-<hash of the
    endpoint>') the document took: each run a directory of another naming than preflight's and run-trainer's,
    and two runs with the same --master the same directory. The workflow's id wins, as for the others."""
    (run,) = (cwd / "ddpdoctor-results").iterdir()
    assert not run.name.startswith("ddpdoctor-bench-") and len(run.name) == 12, run.name
    assert json.loads((run / "nccl-bench.json").read_text())["run_id"] == run.name
    assert f"wrote result: ddpdoctor-results/{run.name}/nccl-bench.json" in p.stdout + p.stderr


@pytest.mark.timeout(240)
def test_terminal_table_and_spread(tmp_path):
    """One run: nccl-tests' table on the terminal, the spread in the JSON that --output keeps."""
    p = bench("--backend", "gloo", "--nproc", "2", "-b", "64K", "-e", "128K", "-n", "4", "-w", "1", "--spread",
              "--output", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "#       size         count      type   redop" in p.stdout
    assert "# Out of bounds values : 0 OK" in p.stdout and "# Avg bus bandwidth" in p.stdout
    row = json.loads((tmp_path / "nccl-bench.json").read_text())["rows"][0]
    assert set(row["spread"]) == {"p50_us", "p99_us", "cv_pct"} and row["spread"]["p99_us"] > 0


@pytest.mark.timeout(240)
def test_corrupted_result_is_counted_and_fails():
    p = bench("--backend", "gloo", "--nproc", "2", "--op", "all_reduce,all_gather", "-b", "8K", "-e", "8K",
              "-n", "2", "-w", "1", "--json", env={"DDPDOCTOR_BENCH_TEST_CORRUPT_RANK": "1"})
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "fail" and doc["summary"]["wrong"] == 3  # one element per checked column
    assert all((r[f] or {}).get("wrong") in (None, 1) for r in doc["rows"] for f in ("out_of_place", "in_place"))


@pytest.mark.timeout(240)
def test_min_busbw_floor_fails(tmp_path):
    """A floor no link meets fails the run; the result is kept (a failed run too) under $DDPDOCTOR_RUN_ID."""
    p = bench("--backend", "gloo", "--nproc", "2", "-b", "8K", "-e", "8K", "-n", "2", "-w", "1", "--min-busbw", "1e6",
              "--json", cwd=tmp_path, env=saving_env(DDPDOCTOR_RUN_ID="demo-1"))
    assert p.returncode == 1 and json.loads(p.stdout)["verdict"] == "fail"
    kept = json.loads((tmp_path / "ddpdoctor-results" / "demo-1" / "nccl-bench.json").read_text())
    assert kept["run_id"] == "demo-1" and kept["verdict"] == "fail"


@pytest.mark.timeout(240)
def test_a_killed_rank_is_named_in_bounded_time_and_the_rows_before_it_are_kept(tmp_path):
    start = time.monotonic()
    p = bench("--backend", "gloo", "--nproc", "3", "-b", "8K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1",
              "--timeout", "20", "--results-dir", str(tmp_path / "results"), cwd=tmp_path,
              env=saving_env(DDPDOCTOR_BENCH_TEST_DIE_RANK="2", DDPDOCTOR_BENCH_TEST_DIE_AT_BYTES="65536"))
    elapsed = time.monotonic() - start
    assert p.returncode == 1, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert lines and "rank 2" in lines[-1] and ("SIGKILL" in lines[-1] or "signal 9" in lines[-1]), p.stderr[-2000:]
    assert "Traceback" not in p.stderr.split("Error:")[-1]
    # the rows measured before rank 2 died (8 KiB, 32 KiB) are shown and kept, the failure said with them
    assert "# Failed after 2 of 5 rows" in p.stdout, p.stdout[-2000:]
    (saved,) = (tmp_path / "results").glob("*/nccl-bench.json")
    doc = json.loads(saved.read_text())
    assert [r["size"] for r in doc["rows"]] == [8192, 32768] and doc["verdict"] == "fail" and doc["exit_code"] == 1
    assert "rank 2" in doc["error"]["message"]
    # --timeout 20; 90 s: the launcher and 3 ranks importing torch, the sweep up to the fault, on 2 loaded cores
    # (a full run with 4 test workers took 81 s); a hang would run into the test's own 240 s limit
    assert elapsed < 20 + 90


@pytest.mark.timeout(300)
def test_localisation_names_the_slow_node():
    # 6 ranks as 6 "nodes" of one rank each; rank 3 sleeps before every op.
    p = bench("--backend", "gloo", "--nproc", "6", "-b", "64K", "-e", "64K", "-n", "3", "-w", "1", "--localise", "--localise-size", "64K",
              "--no-check", "--json",
              env={"DDPDOCTOR_BENCH_TEST_RANKS_PER_NODE": "1", "DDPDOCTOR_BENCH_TEST_SLOW_RANK": "3"}, timeout=280)
    assert p.returncode == 1, p.stderr[-3000:]
    loc = json.loads(p.stdout)["localisation"]
    assert [s["node"] for s in loc["suspects"]] == ["node3"], loc
    assert any(pair["suspect"] and "node3" in pair["nodes"] for pair in loc["pairs"])


@pytest.mark.timeout(240)
def test_two_nodes_meet_through_the_elastic_launcher():
    from ddpdoctor.cluster.local import free_port

    port = free_port()
    argv = [sys.executable, "-m", "ddpdoctor", "nccl-bench", "--backend", "gloo", "--nnodes", "2", "--master",
            f"127.0.0.1:{port}", "--nproc", "1", "-b", "64K", "-e", "64K", "-n", "2", "-w", "1", "--json"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=200) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
    docs = [json.loads(o[0]) for o in outs if o[0].strip()]
    assert len(docs) == 1  # the node holding global rank 0 speaks for the job
    assert docs[0]["run"]["world_size"] == 2 and docs[0]["summary"]["wrong"] == 0


@pytest.mark.timeout(240)
def test_a_hung_rank_is_named_in_bounded_time():
    start = time.monotonic()
    p = bench("--backend", "gloo", "--nproc", "3", "-b", "8K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1",
              "--timeout", "8", env={"DDPDOCTOR_BENCH_TEST_HANG_RANK": "1", "DDPDOCTOR_BENCH_TEST_DIE_AT_BYTES": "65536"})
    elapsed = time.monotonic() - start
    assert p.returncode == 1, p.stderr[-2000:]
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")][-1]
    assert line.startswith("Error: rank 1 on ") and "stopped answering" in line and "131072" in line, line
    assert elapsed < 8 + 90  # --timeout 8; 90 s: the launcher and 3 ranks importing torch, sweep up to the fault
