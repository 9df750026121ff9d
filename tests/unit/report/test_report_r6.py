"""Round 6 (issue 47, "also"): `ddpdoctor report` after `ddpdoctor postmortem` says postmortem, not run-trainer (the
same document kind; a user who never ran run-trainer read the wrong command and "no training metrics recorded")."""
from __future__ import annotations

import json

from ddpdoctor.report import html
from ddpdoctor.report import viewmodel as view
from tests import report_fixtures as fx
from tests.unit.helpers import run_cli


def _postmortem() -> dict:
    doc = fx.trainer()
    doc["config"] = {"source": "postmortem", "log_dir": "/logs/job"}
    doc["metrics"], doc["metrics_summary"] = {}, {}
    return doc


def test_a_postmortems_result_is_headed_postmortem():
    t = view.trainer_view(_postmortem())
    assert t["tool"] == "postmortem" and "no training metrics recorded" not in t["line"]
    page = html.build_html([_postmortem()])
    assert "<h2>postmortem " in page and "<h2>run-trainer" not in page
    assert view.trainer_view(fx.trainer())["tool"] == "run-trainer"


def test_report_of_a_postmortem_file_never_names_run_trainer(tmp_path):
    path = tmp_path / "postmortem.json"
    path.write_text(json.dumps(_postmortem()))
    p = run_cli("report", str(path), "-o", str(tmp_path / "r.html"))
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert "run-trainer" not in p.stdout and "run-trainer" not in (tmp_path / "r.html").read_text().split("<h2>", 1)[1]
