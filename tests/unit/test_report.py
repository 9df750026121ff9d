"""The HTML report: merging, the matrix grouping at 512 nodes, escaping of hostile node data, size, errors."""
from __future__ import annotations

import json
import re
from html import unescape
import subprocess
import sys

import pytest

from ddpdoctor import model
from ddpdoctor.report import html, svg, view
from tests import report_fixtures as fx


def test_view_merges_every_kind_failures_first():
    v = view.build([fx.preflight(8), fx.bench(16), fx.trainer()])
    assert v["verdict"] == "fail"
    assert v["findings"][0]["check"] in ("run-trainer", "nccl-bench")
    assert [f["level"] for f in v["findings"]] == sorted((f["level"] for f in v["findings"]),
                                                          key=lambda lv: -view.SEVERITY[lv])
    assert len(v["bench"]) == 1 and len(v["trainer"]) == 1 and v["node_count"] == 8


def test_matrix_groups_identical_nodes_and_keeps_the_odd_ones():
    v = view.build([fx.preflight(512)])
    rows = v["matrix"]["rows"]
    assert sum(r["count"] for r in rows) == 512
    assert len(rows) <= 6, [r["label"] for r in rows]
    assert rows[0]["worst"] == "fail" and rows[0]["count"] <= 2  # the odd node stands alone, first
    assert max(r["count"] for r in rows) >= 500


def test_facts_diff_names_the_odd_node_with_both_values():
    diff = {d["fact"]: d for d in view.facts_diff(view.merge_nodes([fx.preflight(5, evil=False)]))}
    d = diff["torch-build.torch_version"]
    assert d["majority"] == "2.13.0" and d["odd"] == [{"node": "node002", "value": "2.4.0"}]


def test_reachability_full_matrix_small_failed_links_only_large():
    small = view.reachability(view.merge_nodes([fx.preflight(6, evil=False)]))
    assert len(small["grid"]) == 6 and small["failed"] == [{"src": "node000", "dst": "node002", "class": "timed out"}]
    large = view.reachability(view.merge_nodes([fx.preflight(200, evil=False)]))
    assert large["grid"] == [] and large["failed"]


def test_hostile_node_data_is_shown_literally():
    page = html.build_html([fx.preflight(4), fx.trainer()])
    assert fx.EVIL not in page and "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>alert" not in page and "&lt;/script&gt;&lt;script&gt;alert(2)" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert page.count("<script>") == 1  # ours, inline


def test_self_contained_and_secrets_stay_redacted():
    page = html.build_html([fx.preflight(4), fx.bench(16), fx.trainer()])
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", page)
    assert "http://" not in page and "https://" not in page  # inline SVG in HTML needs no namespace URL
    assert "default-src 'none'" in unescape(page)  # the CSP forbids any fetch even if something slipped in
    assert "<redacted>" not in page and "&lt;redacted&gt;" in page


def test_512_nodes_with_a_full_sweep_stays_under_5_mb():
    page = html.build_html([fx.preflight(512), fx.bench(4096), fx.trainer(8, 2000)])
    assert len(page.encode()) < 5 * 1024 * 1024, len(page)
    assert page.count("<svg") >= 6 + 1 + 2  # six ops, the clock, loss and throughput


def test_svg_labels_are_escaped():
    out = svg.line_chart("t<x>", {"<b>": [(1, 2), (2, 3)]}, xlabel="a&b", ylabel="y", log_x=True, log_y=True)
    assert "<b>" not in out and "&lt;b&gt;" in out and "a&amp;b" in out
    assert svg.line_chart("empty", {}, xlabel="x", ylabel="y") == ""


def test_log_axes_keep_every_grid_line_inside_the_plot():
    # A sweep from 1 KiB to 64 KiB with busbw 0.0015..0.05 once drew decade lines above and left of the plot.
    out = svg.line_chart("b", {"s": [(1024, 0.0015), (65536, 0.05)]}, xlabel="x", ylabel="y", log_x=True, log_y=True)
    grid = re.findall(r'<line x1="([-\d.]+)" y1="([-\d.]+)" x2="([-\d.]+)" y2="([-\d.]+)" class="grid"', out)
    assert grid
    for x1, y1, x2, y2 in (map(float, g) for g in grid):
        assert svg.PAD_L - 1 <= min(x1, x2) and max(x1, x2) <= svg.W - svg.PAD_R + 1
        assert svg.PAD_T - 1 <= min(y1, y2) and max(y1, y2) <= svg.H - svg.PAD_B + 1


def test_report_command_merges_and_errors(tmp_path):
    a = model.dump(fx.preflight(4), tmp_path / "a.json")
    b = model.dump(fx.bench(8), tmp_path / "b.json")
    out = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "report", str(a), str(b), "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "different runs" in p.stderr and out.stat().st_size > 1000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(fx.preflight(2))[:500])
    old = tmp_path / "old.json"
    old.write_text(json.dumps(dict(fx.preflight(2), schema_version=0)))
    for f, needle in ((bad, "not valid JSON"), (old, "schema_version"), (tmp_path / "nope.json", "cannot read")):
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "report", str(a), str(f), "-o", str(out)],
                           capture_output=True, text=True, timeout=60)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and str(f) in lines[0] and needle in lines[0], p.stderr


@pytest.mark.timeout(120)
def test_preflight_report_flag_end_to_end(tmp_path):
    out = tmp_path / "pre.html"
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--only", "env-vars,resources", "--report",
                        str(out)], capture_output=True, text=True, timeout=100)
    assert p.returncode in (0, 1), p.stderr
    page = out.read_text()
    assert 'id="verdict"' in page and "env-vars" in page and "resources" in page
