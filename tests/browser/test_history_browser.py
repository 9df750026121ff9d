"""The history page (`ddpdoctor report --history`) in headless chromium: each node's timeline of check states is
drawn and visible, the drain and the resume marked on it, the run axes in whole runs; a screenshot kept."""
from __future__ import annotations

import re

import pytest

from ddpdoctor.history import collect
from ddpdoctor.report.html import write_history_html
from tests import report_fixtures as fx
from tests.browser.test_report_browser import chromium, console_errors, shoot
from tests.history_fixtures import write_history

pytestmark = pytest.mark.browser
PROBE = ("document.documentElement.dataset.timelines=[...document.querySelectorAll('svg.timeline')].map(s=>{"
         "const b=s.getBoundingClientRect();return Math.round(b.width)+'x'+Math.round(b.height)}).join(',');"
         "document.documentElement.dataset.marks=[...document.querySelectorAll('svg.timeline text')]"
         ".filter(t=>/^[▼▲]$/.test((t.firstChild||{}).nodeValue)&&t.getBoundingClientRect().width>0).length")


@pytest.mark.timeout(180)
def test_the_history_page_draws_each_nodes_timeline_with_its_drain_and_resume(tmp_path):
    write_history(tmp_path / "results", nodes=4, runs=12)
    page = write_history_html(collect(tmp_path / "results"), tmp_path / "history.html")
    probe = tmp_path / "probe.html"
    probe.write_text(fx.with_probe(page.read_text(), PROBE))
    p = chromium("--window-size=1200,2000", "--dump-dom", probe.as_uri(), timeout=120)
    boxes = re.search(r'data-timelines="([^"]*)"', p.stdout).group(1).split(",")
    assert len(boxes) == 4, boxes
    assert all(int(b.split("x")[0]) >= 500 and int(b.split("x")[1]) >= 60 for b in boxes), boxes  # visible
    assert re.search(r'data-marks="(\d+)"', p.stdout).group(1) == "2"  # node3's drain and resume, shown
    assert not console_errors(p.stderr), console_errors(p.stderr)
    ticks = re.findall(r'class="tick" text-anchor="middle">([^<]+)</text>', page.read_text())
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks  # runs are counted: no 1.5
    shot = shoot(page, "history.png", 2000)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
