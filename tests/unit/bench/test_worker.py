"""Unit tests of ddpdoctor/bench/worker.py's documents and harness.planned_rows (no ranks started)."""
from __future__ import annotations

from ddpdoctor.bench.harness import BenchConfig, planned_rows
from ddpdoctor.bench.worker import interrupted_document

FORM = {"time_us": 10.0, "algbw_gbs": 1.0, "busbw_gbs": 2.0, "wrong": 0}


def test_planned_rows_skips_what_measure_skips():
    """sendrecv needs 2 ranks; all_gather at 8 B on 4 ranks of float32 is under one element per rank."""
    cfg = BenchConfig(ops=["all_reduce", "all_gather", "sendrecv"], sizes=[8, 1024])
    assert planned_rows(cfg, 1) == 4  # sendrecv: none on one rank
    assert planned_rows(cfg, 4) == 5  # all_gather 8 B: 2 elements over 4 ranks


def test_an_interrupted_sweep_keeps_its_rows_and_is_no_pass():
    header = {"run": {"backend": "gloo", "world_size": 2}, "hosts": {"0": "vm", "1": "vm"}, "planned": 28}
    rows = [{"op": "all_reduce", "size": 8, "out_of_place": None, "in_place": FORM}]
    doc = interrupted_document(header, rows, "SIGINT", 130)
    assert (doc["kind"], doc["interrupted"], doc["exit_code"], doc["verdict"]) == ("nccl-bench", "SIGINT", 130, "warn")
    assert doc["rows"] == rows and doc["planned_rows"] == 28 and doc["summary"]["avg_busbw_gbs"] == 2.0
    assert doc["run"]["world_size"] == 2 and doc["hosts"] == {"0": "vm", "1": "vm"}
    wrong = [dict(rows[0], in_place=dict(FORM, wrong=3))]
    assert interrupted_document(header, wrong, "SIGTERM", 143)["verdict"] == "fail"  # a wrong element still fails


def test_a_sweep_a_failed_rank_cut_short_keeps_its_rows_and_fails():
    header = {"run": {"backend": "gloo", "world_size": 3}, "hosts": {}, "planned": 8}
    rows = [{"op": "all_reduce", "size": 8192, "out_of_place": None, "in_place": FORM}]
    doc = interrupted_document(header, rows, None, 1, error="rank 2 on vm ended by SIGKILL")
    assert (doc["interrupted"], doc["exit_code"], doc["verdict"]) == (None, 1, "fail")
    assert doc["error"] == {"message": "rank 2 on vm ended by SIGKILL"} and doc["rows"] == rows and doc["planned_rows"] == 8
