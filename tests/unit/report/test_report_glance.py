"""The HTML report at a glance: round axis ticks, sentences that keep their spaces, each merged run's own
size, a trainer failure's file path shown as where it happened (not as a measurement), a heatmap above 64
nodes."""
from __future__ import annotations

import re

import pytest

from ddpdoctor.report import svg
from ddpdoctor.report.html import build_html
from ddpdoctor.report.viewmodel import document_size, reachability
from tests import report_fixtures as fx


@pytest.mark.parametrize("lo,hi", [(1, 20), (4.8, 24.0), (0, 0.37), (0, 53123), (-3.2, 7.7), (2.9, 4.9), (0, 1e-6)])
def test_linear_ticks_are_1_2_5_numbers_inside_the_range(lo, hi):
    ticks = svg._ticks(lo, hi, False)
    assert 2 <= len(ticks) <= 11, ticks
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** __import__("math").floor(__import__("math").log10(step))
    assert round(mantissa, 6) in (1, 2, 5, 10), (ticks, mantissa)
    assert all(lo - 1e-12 <= t <= hi + 1e-12 for t in ticks)
    assert all(abs(t / step - round(t / step)) < 1e-6 for t in ticks)  # multiples of the step: 5, 10, 15


def test_no_sentence_runs_into_the_next():
    page = build_html([fx.preflight(8, run_id="j")])
    text = re.sub(r"<[^>]+>", "", page)
    assert not re.search(r"[a-z]\.[A-Z][a-z]", text.replace("e.g.", "")), re.findall(r".{30}[a-z]\.[A-Z][a-z].{10}", text)
    assert "axis. Largest offset:" in text or "limit. Largest offset:" in text


def test_merged_runs_each_say_their_own_size():
    page = build_html([fx.preflight(1, evil=False, run_id="a"), fx.preflight(3, evil=False, run_id="b"),
                       fx.bench(16, sizes=[1 << 20], run_id="b")])
    assert "preflight (cluster) · 1 node · run a" in page and "preflight (cluster) · 3 nodes · run b" in page
    assert "nccl-bench · 16 ranks on 2 nodes · run b" in page
    assert "node(s)" not in page.split('id="findings"')[0]
    assert document_size({"kind": "run-trainer", "config": {"nnodes": 2, "nproc_per_node": 4}}) == "8 ranks on 2 nodes"
    assert document_size({"kind": "run-trainer", "config": "junk"}) is None


def test_a_failure_location_is_where_it_happened_not_a_measurement():
    page = build_html([fx.trainer(2, 20, run_id="t")])
    findings = page[page.index('id="findings"'):page.index('id="passing"') if 'id="passing"' in page else None]
    assert "(at /w/train.py:12)" in findings and "measured: /w/train.py" not in findings


def test_above_64_nodes_the_matrix_is_a_heatmap_with_every_probed_link():
    doc = fx.preflight(100, evil=False, run_id="j")
    mesh = reachability(doc["nodes"])
    assert not mesh["grid"] and mesh["heatmap"]
    assert len(mesh["heatmap"]["cells"]) == mesh["probed"]
    assert sum(1 for c in mesh["heatmap"]["cells"] if c[2] == "bad") == len(mesh["failed"])
    chart = svg.heatmap("t", mesh["heatmap"]["labels"], mesh["heatmap"]["cells"])
    assert 'data-cell="10"' in chart and "node000 → node002: timed out" in chart
    big = svg.heatmap("t", [str(i) for i in range(4096)], [])
    assert 'data-cell="2"' in big  # never under 2 pixels a cell


def test_table_cells_grow_for_small_clusters():
    assert reachability(fx.preflight(3, run_id="j")["nodes"])["size"] == "s"
    assert reachability(fx.preflight(64, run_id="j")["nodes"])["size"] == "l"


def test_a_log_chart_says_how_many_zero_values_it_could_not_draw():
    """Issue 41 item 3: nccl-bench's smallest sizes measure 0.00 GB/s; the log-scale busbw chart dropped them
    without a word."""
    from ddpdoctor.report import svg

    chart = svg.line_chart("busbw", {"in-place": [(8, 0.0), (16, 0.0), (1024, 0.5), (4096, 1.5)]},
                           xlabel="message size (B)", ylabel="busbw (GB/s)", log_x=True, log_y=True)
    assert "2 values of 0 or less not drawn (a log axis has no 0; the table has them)" in chart
    linear = svg.line_chart("loss", {"r0": [(1, 0.0), (2, 1.0)]}, xlabel="step", ylabel="loss")
    assert "not drawn" not in linear


def test_a_trainer_failure_in_the_report_speaks_words_not_labels():
    """Issue 41 item 3: "exit code —" for a rank ddpdoctor stopped, "missing_rank:" before the message and
    "(missing_rank) (peer_lost)" after a consequence."""
    from ddpdoctor import documents

    doc = documents.envelope(
        "run-trainer", verdict="fail", exit_code=1, start={"fresh": True}, metrics={}, metrics_summary={},
        root_cause={"rank": 1, "local_rank": 1, "host": "vm", "exit_code": None, "category": "hang",
                    "error_type": "missing_rank", "message": "rank(s) 1 never entered all_reduce #15",
                    "location": "/u/t.py:9", "fix": "look at its stack"},
        consequences=[{"rank": 0, "host": "vm", "category": "peer_lost", "signal": "SIGTERM",
                       "reason": "waited in all_reduce #15 for rank(s) 1 (missing_rank)"}],
        hang={"stalled_s": 31.0, "verdict": {"class": "missing_rank"}}, culprit_ranks=[1])
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", build_html([doc])))
    assert "missing_rank" not in text and "peer_lost" not in text and "exit code —" not in text, text
    assert "still running; stopped by ddpdoctor · a hang" in text
    assert "never reached the collective the others wait in: rank(s) 1 never entered all_reduce #15" in text
    assert "(never reached the collective the others wait in) (lost its peer; ended by SIGTERM)" in text


def test_an_interrupted_sweep_says_so_in_the_report():
    doc = dict(fx.bench(2, sizes=[8, 1 << 20], run_id="b"), interrupted="SIGINT", planned_rows=28, verdict="warn")
    page = build_html([doc])
    assert f"interrupted (SIGINT) after {len(doc['rows'])} of 28 rows" in page
