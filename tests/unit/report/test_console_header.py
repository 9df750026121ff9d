"""The preflight header piped at 80 columns: never wrapped inside a phrase (`... 3 \nskip`)."""
from __future__ import annotations

import re

from rich.console import Console

from ddpdoctor.report.console import render_preflight
from tests import report_fixtures as fx


def _header(doc: dict, width: int) -> list[str]:
    console = Console(record=True, width=width, force_terminal=False)
    render_preflight(doc, console)
    return console.export_text().splitlines()[:2]


def test_header_never_breaks_inside_a_phrase_at_80_columns():
    doc = fx.preflight(12, evil=False)  # "[cluster: 12 nodes] verdict: FAIL   2 fail · 5 warn · 100 pass · 0 skip"
    first, second = _header(doc, 80)
    assert len(first) <= 80 and first.startswith("ddpdoctor preflight [cluster: 12 nodes] verdict: FAIL")
    assert re.fullmatch(r"\s*\d+ fail · \d+ warn · \d+ pass · \d+ skip", second), second


def test_header_is_one_line_where_it_fits():
    (first, _) = _header(fx.preflight(3, evil=False), 120)
    assert re.search(r"verdict: FAIL\s+\d+ fail · \d+ warn · \d+ pass · \d+ skip$", first), first
