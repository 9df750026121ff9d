"""The history page (`ddpdoctor report --history`) in headless chromium: each node's timeline of check states is
drawn and visible, the drains and resumes marked on it, time on its axis, each drain's reason and time in words
beside it (issue 56.7: a node drained in a loop, one reason naming the broken library at its end); a screenshot
kept."""
from __future__ import annotations

import re

import pytest

from ddpdoctor.history import collect
from ddpdoctor.report.html import write_history_html
from tests import report_fixtures as fx
from tests.browser.test_report_browser import chromium, console_errors, shoot
from tests.history_fixtures import write_history
from tests.unit.history.test_history import LIB, _drain_loop

pytestmark = pytest.mark.browser
PROBE = ("document.documentElement.dataset.timelines=[...document.querySelectorAll('svg.timeline')].map(s=>{"
         "const b=s.getBoundingClientRect();return Math.round(b.width)+'x'+Math.round(b.height)}).join(',');"
         "document.documentElement.dataset.marks=[...document.querySelectorAll('svg.timeline text')]"
         ".filter(t=>/^[▼▲]$/.test((t.firstChild||{}).nodeValue)&&t.getBoundingClientRect().width>0).length;"
         "document.documentElement.dataset.reasons=[...document.querySelectorAll('table.drains td')]"
         ".filter(td=>td.getBoundingClientRect().width>0).map(td=>td.innerText).join('|')")


@pytest.mark.timeout(180)
def test_the_history_page_draws_each_nodes_timeline_with_its_drain_and_resume(tmp_path):
    write_history(tmp_path / "results", nodes=4, runs=12)
    _drain_loop(tmp_path / "results", "node9")
    page = write_history_html(collect(tmp_path / "results"), tmp_path / "history.html")
    probe = tmp_path / "probe.html"
    probe.write_text(fx.with_probe(page.read_text(), PROBE))
    p = chromium("--window-size=1200,2000", "--dump-dom", probe.as_uri(), timeout=120)
    boxes = re.search(r'data-timelines="([^"]*)"', p.stdout).group(1).split(",")
    assert len(boxes) == 5, boxes
    assert all(int(b.split("x")[0]) >= 500 and int(b.split("x")[1]) >= 60 for b in boxes), boxes  # visible
    assert re.search(r'data-marks="(\d+)"', p.stdout).group(1) == "10"  # node3's drain and resume, node9's 8
    import html

    shown = html.unescape(re.search(r'data-reasons="([^"]*)"', p.stdout).group(1)).split("|")
    assert "2026-11-01 00:20:00Z" in shown and any(cell.endswith(LIB) for cell in shown), shown  # whole, visible
    assert any(cell.startswith("ddpdoctor: clock-skew [meeting]: node3 is 5.1 s ahead") for cell in shown), shown
    assert not console_errors(p.stderr), console_errors(p.stderr)
    timelines = "".join(re.findall(r'<svg[^>]*class="timeline".*?</svg>', page.read_text(), re.S))
    ticks = re.findall(r'class="tick" text-anchor="middle">([^<]+)</text>', timelines)
    assert ticks and all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks), ticks  # the time of day: 00:05
    shot = shoot(page, "history.png", 2000)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
