"""-q on preflight is what --help says, "only the verdict and failures" (issue 41 item 3: it still printed every
warning box in full): the failures with their fixes, the warnings named in one line, no table of passes."""
from __future__ import annotations

from rich.console import Console

from ddpdoctor.report.console import render_preflight
from tests import report_fixtures as fx


def _text(doc: dict, **kw) -> str:
    console = Console(record=True, width=200, force_terminal=False)
    render_preflight(doc, console, **kw)
    return console.export_text()


def test_quiet_shows_the_failures_and_names_the_warnings_in_one_line():
    doc = fx.preflight(3, evil=False)
    for r in doc["results"]:
        if r["check"] in ("network", "packages"):
            r["level"] = "warn"
    doc.pop("groups", None)  # grouped again from the results, as the renderer does without them
    from ddpdoctor.grouping import group_results

    doc["groups"] = group_results(doc["results"], len(doc["nodes"]))
    failing = sorted({r["check"] for r in doc["results"] if r["level"] == "fail"})
    warned = list(dict.fromkeys(g["check"] for g in doc["groups"] if g["level"] == "warn"))
    assert failing and warned
    full, quiet = _text(doc), _text(doc, quiet=True)
    assert all(f"WARN {w}" in full for w in warned)
    assert "WARN " not in quiet and "PASS " not in quiet
    assert all(f"FAIL {c}" in quiet for c in failing) and "fix:" in quiet
    (line,) = [ln for ln in quiet.splitlines() if "not shown" in ln]
    assert line.strip() == (f"{len(warned)} warnings not shown: {', '.join(warned)}; without -q each is shown with "
                            "its fix")
    gate = _text(doc, quiet=True, shown_by="with `ddpdoctor preflight`")  # run-trainer's preflight before a launch
    assert "with `ddpdoctor preflight` each is shown with its fix" in gate and "-q" not in gate
