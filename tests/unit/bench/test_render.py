"""Unit tests of ddpdoctor/report/console_bench.py."""
from __future__ import annotations

import pytest

from ddpdoctor.bench.harness import summary
from ddpdoctor.report.console_bench import row_line


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

    from ddpdoctor.report.console_bench import render

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

    from ddpdoctor.report.console_bench import render

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


FORM = {"time_us": 10.0, "algbw_gbs": 1.0, "busbw_gbs": 1.0, "wrong": 0}
RUN = {"backend": "gloo", "world_size": 2, "nnodes": 1, "dtype": "float32", "warmup": 1, "iters": 2}


def _row(size: int, op: str = "all_reduce") -> dict:
    return {"op": op, "size": size, "count": size // 4, "dtype": "float32", "redop": "sum", "root": -1,
            "out_of_place": FORM, "in_place": FORM}


def test_rows_are_printed_as_they_come_and_the_end_prints_only_the_rest():
    """Issue 41 item 1: the table grows row by row while the sweep runs (nccl-tests' way); the finished document
    then adds only what was not shown yet (the localisation's rows, the footer), never the table again."""
    import io

    from rich.console import Console

    from ddpdoctor.report.console_bench import LiveRows

    out = io.StringIO()
    live = LiveRows(Console(file=out, width=200), bar=True)  # not a terminal: plain lines, no bar
    live.feed([{"header": {"run": RUN, "planned": 3}}, {"row": _row(8)}])
    assert out.getvalue().splitlines()[0] == "# nccl-bench: gloo · 2 ranks on 1 node · float32 · warmup 1 · iters 2"
    assert out.getvalue().splitlines()[-1].split()[0] == "8"  # the first row, before the sweep ends
    live.feed([{"row": _row(16)}])
    live.close()
    done = {"run": RUN, "rows": [_row(8), _row(16), dict(_row(16), group="intra", extra={"node": "n0"})],
            "summary": {"wrong": 0, "avg_busbw_gbs": 1.0}, "verdict": "pass"}
    live.table.rest(done)
    lines = out.getvalue().splitlines()
    assert [ln.split()[0] for ln in lines if not ln.startswith("#")] == ["8", "16", "16"]
    assert sum(ln == "# all_reduce" for ln in lines) == 1 and "# all_reduce (intra n0)" in lines
    assert lines[-2:] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0000 GB/s"]
    assert "\x1b" not in out.getvalue()


def test_an_interrupted_sweep_says_so_under_its_footer():
    import io

    from rich.console import Console

    from ddpdoctor.report.console_bench import render

    out = io.StringIO()
    render({"run": RUN, "rows": [_row(8)], "summary": {"wrong": 0, "avg_busbw_gbs": 1.0}, "verdict": "warn",
            "interrupted": "SIGINT", "planned_rows": 28}, Console(file=out, width=200))
    assert out.getvalue().splitlines()[-1] == ("# Interrupted (SIGINT) after 1 of 28 rows: the figures above are of "
                                               "the rows measured before it")


def test_on_a_terminal_the_progress_bar_counts_the_planned_rows_and_goes_away():
    import io

    from rich.console import Console

    from ddpdoctor.report.console_bench import LiveRows

    out = io.StringIO()
    live = LiveRows(Console(file=out, width=120, force_terminal=True), bar=True)
    live.feed([{"header": {"run": RUN, "planned": 3}}, {"row": _row(8)}])
    task = live.bar.tasks[0]
    assert (task.total, task.completed, task.description) == (3, 1, "nccl-bench: measuring")
    live.close()
    assert live.bar is None


def test_the_feed_reader_takes_whole_lines_only_and_keeps_every_row(tmp_path):
    """A row half written when the reader looks (or when a rank is killed mid-write) is not taken; the rows
    read so far stay for the interrupted document."""
    import json

    from ddpdoctor.bench.feed import FeedReader, FeedWriter

    path = tmp_path / "rows.jsonl"
    writer, reader = FeedWriter(str(path)), FeedReader(str(path))
    writer.put({"header": {"run": RUN, "planned": 2}})
    writer.put({"row": _row(8)})
    with open(path, "a") as fh:
        fh.write(json.dumps({"row": _row(16)})[:20])  # half a line
    assert [list(r) for r in reader.poll()] == [["header"], ["row"]]
    assert reader.poll() == [] and reader.header["planned"] == 2 and [r["size"] for r in reader.rows] == [8]
    with open(path, "a") as fh:
        fh.write(json.dumps({"row": _row(16)})[20:] + "\n")
    assert [r["row"]["size"] for r in reader.poll()] == [16] and len(reader.rows) == 2
    assert FeedReader(None).poll() == [] and FeedReader(str(tmp_path / "none")).poll() == []
