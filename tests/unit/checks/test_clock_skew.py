"""Unit tests of checks/clock_skew.py."""
from __future__ import annotations

from ddpdoctor_checks.clock_skew import ClockSkewCheck

from ddpdoctor.api import Level


def test_clock_skew_uses_the_error_bar():
    facts = {"m": {"offset_ms": 0.0, "bound_ms": 0.0, "reference": True},
             "ok": {"offset_ms": 120.0, "bound_ms": 30.0},  # might be 90 ms: not proven beyond 100 ms
             "warn": {"offset_ms": -300.0, "bound_ms": 1.0},
             "bad": {"offset_ms": 4000.0, "bound_ms": 2.0},
             "silent": {"offset_ms": None, "error": "TimeoutError: timed out"}}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(facts, ClockSkewCheck().with_defaults({"warn_ms": 100.0, "fail_ms": 1000.0}))}
    assert res["ok"].level is Level.PASS and res["warn"].level is Level.WARN and res["bad"].level is Level.FAIL
    assert "ahead of" in res["bad"].summary and "behind" in res["warn"].summary and "ntp" in res["bad"].fix.lower()
    assert res["silent"].level is Level.WARN and "no clock sample" in res["silent"].summary


def test_clock_skew_error_bar_at_the_fail_threshold():
    facts = {"slow-link": {"offset_ms": -1050.0, "bound_ms": 100.0},  # at least 950 ms: warn, not fail
             "sure": {"offset_ms": -1050.0, "bound_ms": 10.0}}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(facts, ClockSkewCheck().with_defaults({"warn_ms": 100.0, "fail_ms": 1000.0}))}
    assert res["slow-link"].level is Level.WARN and res["sure"].level is Level.FAIL
    assert "1050.00 ms ± 10.00 ms behind" in res["sure"].summary
    assert res["sure"].actual == {"offset_ms": -1050.0, "bound_ms": 10.0}
    custom = ClockSkewCheck().compare({"n": {"offset_ms": 60.0, "bound_ms": 1.0}}, ClockSkewCheck().with_defaults({"warn_ms": 10, "fail_ms": 50}))
    assert custom[0].level is Level.FAIL  # thresholds are configurable


def test_clock_skew_exports_its_offset_and_warning_limit():
    """The report's clock chart reads only the "clock" export: offset, bound and the limit the run used."""
    facts = {"offset_ms": 3.2, "bound_ms": 0.1, "rtt_ms": 0.2, "samples": 8, "reference": False, "warn_ms": 5.0}
    assert ClockSkewCheck().exports(facts) == {"clock": {"offset_ms": 3.2, "bound_ms": 0.1, "limit_ms": 5.0}}
    assert ClockSkewCheck().exports({}) == {}


def test_a_skewed_master_is_named_not_the_nodes_that_agree():
    # faketime +5s on the master of 3: both other nodes measured 5 s "behind the master" and were named, the
    # master passed as the reference clock; they agree with each other, so the master is the odd clock
    opts = ClockSkewCheck().with_defaults({"warn_ms": 100.0, "fail_ms": 1000.0})
    facts = {"m": {"offset_ms": 0.0, "bound_ms": 0.0, "reference": True},
             "a": {"offset_ms": -5000.0, "bound_ms": 0.5}, "b": {"offset_ms": -4990.0, "bound_ms": 0.3}}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(facts, opts)}
    assert res["m"].level is Level.FAIL and res["a"].level is Level.PASS and res["b"].level is Level.PASS
    assert res["m"].summary.startswith("m (the master) is 4990.00 ms ± 0.50 ms ahead of the other nodes (2 of 3 agree")
    assert res["m"].actual == {"offset_ms": 4990.0, "bound_ms": 0.5, "against": "most nodes"}
    assert "5000.00 ms ± 0.50 ms behind the master; 10.00 ms from most nodes" in res["a"].summary
    # two nodes are a tie: the master's clock stays the reference (the worker is said to be behind it)
    two = {k: facts[k] for k in ("m", "a")}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(two, opts)}
    assert res["m"].level is Level.PASS and res["a"].level is Level.FAIL
    # a majority with the master: unchanged, the odd worker is named
    three = dict(facts, b={"offset_ms": 3.0, "bound_ms": 0.2})
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(three, opts)}
    assert [n for n, r in res.items() if r.level is not Level.PASS] == ["a"] and "reference clock" in res["m"].summary
    # the master's own entry missing: nobody can say the master is odd, so the offsets stay against its clock
    workers = {"a": facts["a"], "b": facts["b"], "c": {"offset_ms": -5001.0, "bound_ms": 0.4}}
    res = {r.nodes[0]: r for r in ClockSkewCheck().compare(workers, opts)}
    assert all(r.level is Level.FAIL for r in res.values())
