"""One summary per cluster: a node other than the master prints one line (report/console.render_worker_line)."""
from __future__ import annotations

import io

from rich.console import Console

from ddpdoctor.report.console import render_worker_line


def rendered(doc: dict) -> str:
    buf = io.StringIO()
    render_worker_line(doc, Console(file=buf, width=100, color_system=None))
    return buf.getvalue()


def result(level: str, summary: str, nodes=("node2",), fix="do this") -> dict:
    return {"check": "parity", "level": level, "summary": summary, "nodes": list(nodes), "fix": fix}


def worker_doc(master: dict, results: list[dict], verdict="warn", exit_code=0) -> dict:
    return {"role": "worker", "this_node": "node2", "verdict": verdict, "exit_code": exit_code, "results": results,
            "master": master}


def test_one_line_with_the_verdict_exit_code_and_where_the_master_wrote_the_result():
    doc = worker_doc({"node": "node1", "host": "node1", "output_dir": "/shared/out", "results": 3},
                     [result("pass", "a"), result("warn", "the master's warning"), result("fail", "a failure")],
                     verdict="fail", exit_code=1)
    text = rendered(doc)
    assert text.count("\n") == 1, text
    assert "[node2] cluster verdict: FAIL (exit 1, 1 fail, 1 warn)" in text
    assert "node1 printed the full summary and wrote the cluster result to /shared/out/cluster.json" in text
    assert "-v" in text and "the master's warning" not in text  # the master shows its findings, once


def test_without_output_dir_the_line_says_how_to_keep_the_cluster_result():
    text = rendered(worker_doc({"node": "node1", "host": "node1", "output_dir": None, "results": 0}, [],
                               verdict="pass"))
    assert "cluster verdict: PASS (exit 0, no problem found)" in text and "--output DIR" in text


def test_what_only_this_node_saw_is_shown_after_the_line_and_text_from_the_master_is_escaped():
    own = result("warn", "node node2 ignored an invalid message at roster: bad signature", nodes=())
    doc = worker_doc({"node": "node1", "host": "node1", "output_dir": "/out/\x1b[31mred", "results": 1},
                     [result("pass", "from the master"), own])
    text = rendered(doc)
    assert "ignored an invalid message at roster" in text and "fix: do this" in text
    assert "\x1b" not in text and "\\x1b[31mred" in text


def test_run_trainers_gate_line_gives_no_preflight_flag_advice():
    text = rendered_hints(worker_doc({"node": "node1", "host": "node1", "output_dir": None, "results": 0}, [],
                                     verdict="pass"))
    assert "node1 printed the full summary" in text and "--output" not in text and "-v" not in text


def rendered_hints(doc: dict) -> str:
    buf = io.StringIO()
    render_worker_line(doc, Console(file=buf, width=100, color_system=None), hints=False)
    return buf.getvalue()


def test_an_unauthenticated_run_says_so_on_the_workers_verdict_line_and_why():
    """Issue 25 item 1: every node says in its verdict that the run was not authenticated (the verdict a
    worker shows could be a forgery); the line used to read 'PASS (exit 0, no problem found)' alone."""
    doc = worker_doc({"node": "node1", "host": "node1", "output_dir": None, "results": 2}, [], verdict="pass")
    doc["auth"] = {"authenticated": False, "note": "anyone who can reach the port could forge the verdict",
                   "fix": "export DDPDOCTOR_TOKEN=..."}
    lines = rendered(doc).splitlines()
    assert "cluster verdict: PASS (exit 0, no problem found, NOT AUTHENTICATED)" in lines[0], lines
    assert lines[1].startswith("NOT AUTHENTICATED: anyone who can reach") and "DDPDOCTOR_TOKEN" in lines[1], lines
    doc["auth"] = {"authenticated": True, "mode": "key"}
    assert "AUTHENTICATED" not in rendered(doc)
