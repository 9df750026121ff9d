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
