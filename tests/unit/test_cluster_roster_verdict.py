"""Roster naming, the run budget and the verdict's findings, with plain dicts."""
from __future__ import annotations

import time

from ddpdoctor.cluster import roster, verdict
from ddpdoctor.cluster.budget import SLACK_S, Budget
from ddpdoctor.cluster.mailbox import Finding


def node(rank, host, addr, claim=1):
    return {"rank": rank, "claim": claim, "host": host, "addr": addr}


def test_names_are_unique_and_readable():
    idents = [node(0, "a", "10.0.0.1"), node(1, "b", "10.0.0.2"), node(2, "b", "10.0.0.3"),
              node(3, "c", "10.0.0.4"), node(3, "c", "10.0.0.4", claim=2)]
    roster.name_nodes(idents)
    assert [i["name"] for i in idents] == ["a", "b@10.0.0.2", "b@10.0.0.3", "c@10.0.0.4#r3", "c@10.0.0.4#r3.2"]


def test_long_host_names_are_shortened_for_display_and_stay_distinct():
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    assert len(roster.display_host(a)) <= roster.DISPLAY_HOST_MAX
    assert roster.display_host(a) != roster.display_host(b)
    assert roster.display_host("short") == "short"


def test_missing_message_names_ranks_hosts_and_duplicates():
    msg = roster.missing_message(present=[0, 1], missing=[2], idents=[node(0, "a", "1.1.1.1"), node(1, "b", "1.1.1.2"),
                                                                     node(1, "c", "1.1.1.3", claim=2)],
                                 endpoint="a:29500", nnodes=3, timeout=20)
    assert "missing rank(s) 2" in msg and "b (1.1.1.2) rank 1" in msg and "claimed by more than one node" in msg


def test_budget_is_two_timeouts_plus_slack_and_caps_the_collective():
    b = Budget(10.0, start=time.monotonic())
    assert b.total_s == 20 + SLACK_S
    assert b.meet_by - b.start == 10
    assert b.collective_limit(300) <= b.total_s - 8
    late = Budget(10.0, start=time.monotonic() - 40)
    assert late.collective_limit(30) == 0.0 and late.left() == 0.0


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
