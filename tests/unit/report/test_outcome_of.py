"""The renderers decide on a document's ``outcome`` (report/outcome_of.py): its state and the ranks it names, and
an older document without one the same way from its older keys."""
from __future__ import annotations

import io

from rich.console import Console

from ddpdoctor.report import outcome_of
from ddpdoctor.report.console_trainer import render
from ddpdoctor.report.views.trainer import root_title

ROOT = {"rank": 1, "local_rank": 1, "host": "n1", "exit_code": 1, "category": "exception", "error_type": "ValueError",
        "message": "bad batch", "location": "/home/u/train.py:40", "fix": "fix the batch", "victim": False}


def outcome(state: str, ranks=(), verdict="fail") -> dict:
    return {"state": state, "verdict": verdict, "category": "exception",
            "culprits": [{"rank": r, "named": True} for r in ranks]}


def shown(doc: dict) -> str:
    buf = io.StringIO()
    render(doc, Console(file=buf, width=120, force_terminal=False, color_system=None))
    return buf.getvalue()


def test_the_title_comes_from_the_outcomes_culprits_not_the_older_key():
    doc = {"verdict": "fail", "root_cause": ROOT, "culprit_ranks": [], "outcome": outcome("fail", [1])}
    assert outcome_of.root_title(doc) == "root cause" and root_title(doc)["root_title"] == "Root cause"
    doc["outcome"] = outcome("fail")
    assert outcome_of.root_title(doc) == "first failure, no culprit named"
    assert outcome_of.root_title({**doc, "root_cause": dict(ROOT, rank=None)}) == "no culprit rank named"


def test_a_stop_on_request_is_said_as_one_in_the_terminal_and_the_report():
    doc = {"verdict": "fail", "root_cause": dict(ROOT, category="signal"), "outcome": outcome("interrupted")}
    assert root_title(doc)["root_title"] == "Stopped on request"
    assert "FAIL — stopped on request" in shown(doc)


def test_an_unverified_outcome_is_never_a_fail_panel():
    """The state decides the panel: a document whose outcome is unverified shows NOT VERIFIED, whatever its
    root cause's category says."""
    doc = {"verdict": "warn", "root_cause": dict(ROOT, rank=None, category="unknown", message="nothing shows an end"),
           "outcome": outcome("unverified", verdict="warn")}
    text = shown(doc)
    assert "NOT VERIFIED" in text and "FAIL" not in text


def test_an_older_document_without_outcome_reads_its_older_keys():
    old = {"verdict": "fail", "root_cause": ROOT, "culprit_ranks": [1]}
    assert outcome_of.state(old) == "fail" and outcome_of.root_title(old) == "root cause"
    assert outcome_of.state({"verdict": "pass"}) == "pass" and outcome_of.passed({"verdict": "pass"})
    assert outcome_of.state({"verdict": "warn", "root_cause": dict(ROOT, category="unverified")}) == "unverified"
    assert outcome_of.root_title({"verdict": "fail", "root_cause": dict(ROOT, category="interrupted")}) == \
        "stopped on request"
    assert outcome_of.culprit_ranks({"verdict": "fail"}) is None


def test_a_likely_culprit_is_the_likely_root_cause():
    doc = {"verdict": "fail", "root_cause": ROOT, "outcome": dict(outcome("fail"), culprits=[{"rank": 1, "named": False}])}
    assert outcome_of.root_title(doc) == "likely root cause" and "FAIL — likely root cause" in shown(doc)
