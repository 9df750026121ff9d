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
    common, odd = majority({"a": [1], "b": [2]})  # a tie: deterministic
    assert common == [1] and odd == ["b"]


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
