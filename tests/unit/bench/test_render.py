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


def test_host_names_from_other_nodes_are_shown_never_obeyed():
    """--localise names nodes by the host names every rank reported: an escape sequence in one (an OSC that
    retitles the terminal, a clear screen) is printed as \\x1b..., on every line that shows it."""
    import io

    from rich.console import Console

    from ddpdoctor.bench.render import render

    evil = "node7\x1b]0;owned\x07\x1b[2J"
    form = {"time_us": 10.0, "algbw_gbs": 1.0, "busbw_gbs": 1.0, "wrong": 0}
    doc = {"run": {"backend": "gloo", "world_size": 4, "nnodes": 2, "dtype": "float32", "warmup": 1, "iters": 2},
           "rows": [{"op": "all_reduce", "group": "pair", "extra": {"node": evil}, "size": 8, "count": 2,
                     "dtype": "float32", "redop": "sum", "root": -1, "out_of_place": None, "in_place": form}],
           "summary": {"wrong": 0, "avg_busbw_gbs": 1.0}, "verdict": "fail",
           "localisation": {"threshold": 0.8, "pairs": [{"nodes": ["node1", evil], "busbw_gbs": 0.1, "suspect": True}],
                            "suspects": [{"node": evil, "busbw_gbs": 0.1, "median_gbs": 1.0}]}}
    out = io.StringIO()
    render(doc, Console(file=out, force_terminal=True, width=200))
    text = out.getvalue()
    assert "\x1b]0;owned" not in text and "\x1b[2J" not in text and "\x07" not in text
    assert text.count("node7\\x1b]0;owned\\x07\\x1b[2J") == 3, text  # the pair's title, the pair, the slow node


def test_no_hash_line_wraps_at_80_columns():
    """Piped at 80 columns the header wrapped inside a phrase ('... · CUDA\\ngraph'), the continuation without
    its '#': every line of nccl-tests' format is a '#' line, a row, or the verdict's own lines."""
    import io

    from rich.console import Console

    from ddpdoctor.bench.render import render

    form = {"time_us": 10.0, "algbw_gbs": 1.0, "busbw_gbs": 1.0, "wrong": 0}
    long_host = "gpu-node-0042.rack17.datacenter-west.example.com"
    doc = {"run": {"backend": "nccl", "world_size": 16, "nnodes": 2, "dtype": "bfloat16", "warmup": 5, "iters": 20,
                   "graph": True},
           "rows": [{"op": "all_reduce", "group": "pair", "extra": {"node": long_host}, "size": 1 << 30,
                     "count": 1 << 29, "dtype": "bfloat16", "redop": "sum", "root": -1, "out_of_place": form,
                     "in_place": form}],
           "summary": {"wrong": 0, "avg_busbw_gbs": 1.0}, "verdict": "pass",
           "localisation": {"threshold": 0.8, "pairs": [{"nodes": [long_host, long_host.replace("42", "43")],
                                                         "busbw_gbs": 1.0, "suspect": False}], "suspects": []}}
    out = io.StringIO()
    render(doc, Console(file=out, width=80, force_terminal=False, color_system=None))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("iters 20 · CUDA graph"), lines[:2]
    assert all(line.startswith("#") or line.lstrip()[:1].isdigit() for line in lines), lines
