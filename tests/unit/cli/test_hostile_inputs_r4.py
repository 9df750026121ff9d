"""Round 4's crafted inputs (issue 33, part 3): digits that `isdigit()` takes and `int()` does not, numbers
no axis can hold, lone surrogates, deep folders, unreadable folders, /proc. Each one reached exit 4 before;
now each is a result (exit 0/1) or one line with exit 2, never an internal error."""
from __future__ import annotations

import copy
import json

import pytest

from tests import report_fixtures as rf
from tests.unit.helpers import run_cli

ODD_DIGITS = ("²", "①")


def report_of(tmp_path, doc, name="doc"):
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / f"{name}.html"
    p = run_cli("report", str(src), "-o", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    return out.read_text()


@pytest.mark.parametrize("odd", ODD_DIGITS)
def test_report_metric_keys_and_node_names_of_odd_digits(tmp_path, odd):
    tr = rf.trainer(4, 10)
    tr["metrics"][odd] = tr["metrics"].pop("1")
    report_of(tmp_path, tr, "trainer")
    pf = rf.preflight(4, evil=False)
    first = next(iter(pf["nodes"]))
    pf["nodes"][odd] = pf["nodes"].pop(first)
    pf["nodes"][f"node{odd}"] = pf["nodes"].pop(next(iter(pf["nodes"])))
    report_of(tmp_path, pf, "preflight")


def _set_clock(doc, value):
    for i, node in enumerate(doc["nodes"].values()):
        for export in (node.get("exports") or {}).values():
            if isinstance(export, dict) and isinstance(export.get("clock"), dict):
                export["clock"]["offset_ms"] = value if i % 2 else 1.0
                export["clock"]["bound_ms"] = value if i == 3 else 0.1


@pytest.mark.parametrize("value", [1e308, -1e308, 1.7e308])
def test_report_clock_offsets_no_axis_can_hold_are_left_out_and_said(tmp_path, value):
    doc = rf.preflight(4, evil=False)
    _set_clock(doc, value)
    page = report_of(tmp_path, doc)
    assert "not drawn" in page and "inf" not in page.split("<svg", 1)[-1].split("</svg>", 1)[0]


@pytest.mark.parametrize("pair", [(1.6e308, -1.6e308), (1e308, 3.0), (float("inf"), 1.0)])
def test_report_losses_no_axis_can_hold_are_left_out_and_said(tmp_path, pair):
    doc = rf.trainer(2, 10)
    for i, row in enumerate(doc["metrics"]["0"]):
        row["loss"] = row["tokens_per_s"] = pair[i % 2]
    assert "values not drawn" in report_of(tmp_path, doc)


def test_report_bench_bandwidth_of_1e308(tmp_path):
    doc = rf.bench(4)
    for row in doc["rows"]:
        for form in ("in_place", "out_of_place"):
            if row.get(form):
                row[form]["busbw_gbs"] = 1.6e308 if row["size"] % 2048 else -1.6e308
    report_of(tmp_path, doc)


def test_svg_axes_take_any_float():
    from ddpdoctor.report import svg

    for pair in ((1.6e308, -1.6e308), (1e308, 1e-308), (-1e308, 0.0)):
        svg.line_chart("t", {"a": [(1, pair[0]), (2, pair[1])]}, xlabel="x", ylabel="y")
        svg.line_chart("t", {"a": [(pair[0], 1.0), (pair[1], 2.0)]}, xlabel="x", ylabel="y", log_x=True, log_y=True)
        svg.bars("b", [("n0", pair[0], False), ("n1", pair[1], True)], ylabel="y", ref=pair[0])
        svg.offsets_chart("c", [("n0", "0", pair[0], pair[1], True), ("n1", "1", 1.0, 0.1, False)], ylabel="ms",
                          half=1.0, step=0.5)
