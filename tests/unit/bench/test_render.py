"""Unit tests of ddpdoctor/bench/render.py."""
from __future__ import annotations

import pytest

from ddpdoctor.bench.harness import summary
from ddpdoctor.bench.render import row_line


def test_summary_counts_wrong_and_averages_every_column():
    rows = [{"op": "all_reduce", "in_place": {"busbw_gbs": 2.0, "wrong": 0}, "out_of_place": None},
            {"op": "all_gather", "in_place": {"busbw_gbs": 1.0, "wrong": 3}, "out_of_place": {"busbw_gbs": 3.0, "wrong": 1}}]
    s = summary(rows)
    assert s["wrong"] == 4 and s["avg_busbw_gbs"] == pytest.approx(2.0)
    assert s["by_op"]["all_gather"]["avg_busbw_gbs"] == pytest.approx(2.0)


def test_row_line_has_nccl_tests_columns():
    line = row_line({"size": 1048576, "count": 262144, "dtype": "float32", "redop": "sum", "root": -1,
                     "out_of_place": None, "in_place": {"time_us": 10.5, "algbw_gbs": 99.86, "busbw_gbs": 174.76, "wrong": 0}})
    cols = line.split()
    assert cols[:5] == ["1048576", "262144", "float32", "sum", "-1"] and cols[5] == "n/a"
    assert cols[6:] == ["10.5", "99.86", "174.76", "0"]
