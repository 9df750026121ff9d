"""Unit tests of ddpdoctor/api.py."""
from __future__ import annotations

import json
import math

import pytest

from ddpdoctor import documents
from ddpdoctor.api import Level, Option, Result, majority
from ddpdoctor.exitcodes import ExitCode


def test_worst_level_and_verdict():
    assert Level.worst([Level.PASS, Level.SKIP, Level.WARN]) is Level.WARN
    assert Level.worst([]) is Level.PASS
    skip_only = [Result("a", Level.SKIP, "s")]
    assert documents.verdict_of(skip_only) is Level.PASS
    assert documents.exit_code_of(documents.verdict_of([Result("a", Level.FAIL, "f")])) == ExitCode.FAIL


def test_majority_names_the_odd_nodes():
    common, odd = majority({"a": "2.13", "b": "2.13", "c": "2.4"})
    assert common == "2.13" and odd == ["c"]
    assert majority({}) == (None, [])
    common, odd = majority({"a": [1], "b": [2]})  # a tie: no majority (issue 20: never one side by sort order)
    assert common is None and odd == ["a", "b"]


def test_option_conversion():
    assert Option(1.0, "").convert("2.5") == 2.5
    assert Option(True, "").convert("off") is False
    with pytest.raises(ValueError):
        Option(True, "").convert("maybe")
    with pytest.raises(ValueError):
        Option(1.0, "").convert(True)


def test_result_json_roundtrip():
    r = Result("x", Level.WARN, "sum", ["n1"], actual=1, expected=2, fix="do", details={"k": 1})
    assert Result.from_json(json.loads(json.dumps(r.to_json()))) == r


@pytest.mark.parametrize("default, value, expected", [
    (8, "10", 10), (8, 10.0, 10), (8, 0, 0), (1.0, "2.5", 2.5), (1.0, 3, 3.0), (True, "off", False),
    (True, False, False), ("warn", "fail", "fail"),
])
def test_option_accepts_sound_values(default, value, expected):
    got = Option(default, "").convert(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("default, value, needle", [
    (8, True, "expected a number"),  # bool is an int in Python, not here
    (8, 2.5, "whole number"),
    (8, "soon", "expected a number"),
    (1.0, "nan", "finite"), (1.0, math.nan, "finite"), (1.0, math.inf, "finite"), (1.0, "-inf", "finite"),
    (1.0, "1e999", "finite"),
    (1.0, -1, "below the minimum"),
    (8, 10**30, "above the maximum"),
    (1.0, [1], "expected a number"), (1.0, {"a": 1}, "expected a number"),
    (True, 5, "true/false"), (True, "maybe", "true/false"),
    ("warn", 5, "expected a string"),
])
def test_option_rejects_wrong_types_and_absurd_numbers(default, value, needle):
    with pytest.raises(ValueError, match=needle):
        Option(default, "").convert(value)


def test_option_bounds_are_per_option():
    assert Option(0.0, "", min=-10).convert(-5) == -5.0
    with pytest.raises(ValueError, match="above the maximum 5"):
        Option(1, "", max=5).convert(6)


# ---- issue 20: no false majority ------------------------------------------------------------------------
from ddpdoctor.api import NoMajority, Result as _Result, split, odd_ones  # noqa: E402


def test_split_names_every_side_when_no_value_leads():
    two = split({"node1": "2.4.6", "node2": "2.1.3"})
    assert two.no_majority and two.basis == "" and two.reference is None and two.odd == ("node1", "node2")
    assert two.sides == (("2.4.6", ("node1",)), ("2.1.3", ("node2",)))  # node order, never value order
    assert two.sides_text(str) == "2.4.6 on node1; 2.1.3 on node2"
    tie = split({"a": 1, "b": 1, "c": 2, "d": 2})
    assert tie.no_majority and tie.odd == ("a", "b", "c", "d") and tie.sides_text() == "1 on a, b; 2 on c, d"
    three_ways = split({"a": 1, "b": 2, "c": 3})
    assert three_ways.no_majority and len(three_ways.sides) == 3
    lead = split({"a": 1, "b": 1, "c": 2, "d": 3})  # 2 of 4 lead, no other value has 2
    assert lead.basis == "majority" and lead.reference == 1 and lead.odd == ("c", "d")
    same = split({"a": [1], "b": [1]})
    assert same.basis == "majority" and not same.odd and not same.no_majority
    assert split({}).odd == () and not split({}).no_majority


def test_split_against_a_baseline_counts_nothing():
    whole = split({"a": "2.14", "b": "2.14", "c": "2.14"}, baseline=["2.13"])
    assert whole.basis == "baseline" and whole.odd == ("a", "b", "c") and whole.reference == "2.13"
    two = split({"a": "2.13", "b": "2.14"}, baseline=["2.13"])
    assert two.odd == ("b",) and not two.no_majority
    either = split({"a": "x", "b": "y", "c": "z"}, baseline=["x", "y"])
    assert either.odd == ("c",) and either.reference_text() == "one of 'x', 'y'"
    assert split({"a": 1, "b": 2}, baseline=[]).no_majority  # an empty baseline says nothing
    # every node's value accepted (the baseline's own nodes differed), yet the nodes differ: judged without it
    within = split({"a": "x", "b": "y"}, baseline=["x", "y"])
    assert within.no_majority and within.odd == ("a", "b")
    lead = split({"a": "x", "b": "x", "c": "y"}, baseline=["x", "y"])
    assert lead.basis == "majority" and lead.reference == "x" and lead.odd == ("c",)
    agree = split({"a": "y", "b": "y"}, baseline=["x", "y"])
    assert agree.basis == "baseline" and agree.odd == ()


def test_odd_ones_hands_a_tie_to_its_caller_or_names_every_side():
    judge = lambda n, v, common: _Result("x", Level.FAIL, f"{n}: {v!r} vs {common!r}", [n])  # noqa: E731
    tie = lambda s: [_Result("x", Level.FAIL, f"no majority: {s.sides_text()}", list(s.odd))]  # noqa: E731
    (one,) = odd_ones({"a": 1, "b": 2}, judge, tie=tie)
    assert one.nodes == ["a", "b"] and one.summary == "no majority: 1 on a; 2 on b"
    plain = odd_ones({"a": 1, "b": 2}, judge)  # a plugin without a tie handler: no side is picked
    assert [r.nodes for r in plain] == [["a"], ["b"]]
    assert all("no majority (1 on a; 2 on b)" in r.summary for r in plain)
    assert isinstance(NoMajority("x"), str)
    assert [r.nodes for r in odd_ones({"a": 1, "b": 1, "c": 2}, judge, tie=tie)] == [["c"]]
    assert [r.nodes for r in odd_ones({"a": 1, "b": 1}, judge, baseline=[2])] == [["a"], ["b"]]
