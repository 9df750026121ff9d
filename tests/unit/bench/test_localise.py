"""Unit tests of ddpdoctor/bench/localise.py."""
from __future__ import annotations

import pytest

from ddpdoctor.bench import localise


# ---------------------------------------------------------------- localisation
def test_outliers_by_ratio_and_mad():
    assert localise.outliers({"a": 10, "b": 10.2, "c": 9.9, "d": 5}) == ["d"]
    assert localise.outliers({"a": 10, "b": 10.1}) == []
    assert localise.outliers({"a": 10}) == []


def test_pairings_and_retests_are_disjoint():
    assert localise.pairings(["n0", "n1", "n2", "n3"]) == [("n0", "n1"), ("n2", "n3")]
    assert localise.pairings(["n0", "n1", "n2"]) == [("n0", "n1"), ("n2", "n0")]
    r1 = {("n0", "n1"): 10.0, ("n2", "n3"): 4.0, ("n4", "n5"): 10.0}
    retests = localise.retest_pairings(r1, [("n2", "n3")])
    assert retests == [("n2", "n0"), ("n3", "n1")]


def test_judge_names_the_slow_node_not_its_partner():
    r1 = {("n0", "n1"): 10.0, ("n2", "n3"): 4.0, ("n4", "n5"): 10.2, ("n6", "n7"): 9.8}
    r2 = {("n2", "n0"): 9.9, ("n3", "n1"): 4.1}
    v = localise.judge(r1, r2, 0.8)
    assert [s["node"] for s in v["suspects"]] == ["n3"]
    assert v["suspects"][0]["busbw_gbs"] == pytest.approx(4.1) and v["suspects"][0]["median_gbs"] == pytest.approx(9.9)
    assert [p["suspect"] for p in v["pairs"]] == [False, True, False, False]


def test_judge_a_slow_link_not_a_node():
    r1 = {("n0", "n1"): 10.0, ("n2", "n3"): 4.0, ("n4", "n5"): 10.0}
    r2 = {("n2", "n0"): 10.0, ("n3", "n1"): 10.0}
    v = localise.judge(r1, r2)
    assert v["suspects"] == [] and v["unexplained"] == [["n2", "n3"]]
