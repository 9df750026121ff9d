"""The report of a large cluster (issue 55 U6): the nodes' facts in the page stop at a budget (a 64-node full
mesh's facts made a 3.9 MB page); the result file keeps them all and the page says so."""
from __future__ import annotations

from ddpdoctor.report import html
from tests import report_fixtures as fx


def test_a_64_node_full_mesh_report_stays_under_2_mb(tmp_path):
    doc = fx.preflight(64)
    names = sorted(doc["nodes"])
    for name in names:  # each node's probes and lookups of every peer, as a full mesh gathers them
        doc["nodes"][name].setdefault("facts", {})["names"] = {"lookups": [
            {"kind": kind, "query": peer, "answer": [f"10.0.0.{i}"], "error": None, "seconds": 0.0004, "node": peer}
            for i, peer in enumerate(names) for kind in ("forward", "reverse")]}
    doc["results"].append({"check": "clock-sync", "level": "warn", "summary": "clock not synchronised",
                           "nodes": names, "actual": None, "expected": None, "fix": "enable NTP", "details": {}})
    page = tmp_path / "r.html"
    html.write_html([doc], page)
    text = page.read_text()
    assert page.stat().st_size < 2 * 2**20, page.stat().st_size
    assert "more node(s) are in the result file (cluster.json)" in text
