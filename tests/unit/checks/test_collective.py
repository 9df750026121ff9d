"""Unit tests of checks/collective.py."""
from __future__ import annotations

from ddpdoctor_checks.collective import CollectiveCheck

from ddpdoctor.api import Level


def test_collective_wrong_sum_and_failure():
    facts = {"a": {"runs": [{"backend": "gloo", "ok": True, "result": 3.0, "busbw_gbps": 1.2, "time_us": 900,
                             "init_s": 0.2}]},
             "b": {"runs": [{"backend": "gloo", "ok": False, "result_ok": False, "result": 2.0}]},
             "c": {"runs": [{"backend": "nccl", "ok": False, "error": "DistBackendError: NCCL error",
                             "first_warn": "NCCL WARN Net : Connection closed"}]}}
    res = {r.nodes[0]: r for r in CollectiveCheck().compare(facts, CollectiveCheck().with_defaults({"min_busbw_gbps": 0.0}))}
    assert res["a"].level is Level.PASS and "sum of ranks correct" in res["a"].summary
    assert res["b"].level is Level.FAIL and "wrong data" in res["b"].summary
    assert res["c"].level is Level.FAIL and "NCCL WARN" in res["c"].summary


def test_collective_slow_gloo_warns_only_below_the_floor():
    run = {"backend": "gloo", "ok": True, "result": 1.0, "busbw_gbps": 0.5, "time_us": 100, "init_s": 0.1}
    (warn,) = CollectiveCheck().compare({"a": {"runs": [run]}}, CollectiveCheck().with_defaults({"min_busbw_gbps": 1.0}))
    assert warn.level is Level.WARN and "GLOO_SOCKET_IFNAME" in warn.fix
    (ok,) = CollectiveCheck().compare({"a": {"runs": [run]}}, CollectiveCheck().with_defaults({"min_busbw_gbps": 0.0}))
    assert ok.level is Level.PASS
