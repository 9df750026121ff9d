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


def test_judge_a_noisy_retest_beside_the_slow_node_is_not_named():
    """Seen on a loaded 2-core host: node2's retest dipped under the threshold (0.040 against a median of
    0.061) while its partner node3, the real slow node, measured 0.001: only node3 is named."""
    r1 = {("node0", "node1"): 0.1255, ("node2", "node3"): 0.0013, ("node4", "node5"): 0.0606}
    r2 = {("node2", "node0"): 0.0403, ("node3", "node1"): 0.0013}
    v = localise.judge(r1, r2, 0.8)
    assert [s["node"] for s in v["suspects"]] == ["node3"] and v["unexplained"] == []
    assert {tuple(r["nodes"]): r["busbw_gbs"] for r in v["retests"]}[("node2", "node0")] == pytest.approx(0.0403)


def test_judge_two_slow_nodes_of_one_pair_are_both_named():
    r1 = {("n0", "n1"): 10.0, ("n2", "n3"): 3.0, ("n4", "n5"): 10.0, ("n6", "n7"): 9.9}
    r2 = {("n2", "n0"): 3.2, ("n3", "n1"): 2.9}
    v = localise.judge(r1, r2, 0.8)
    assert [s["node"] for s in v["suspects"]] == ["n2", "n3"]


def test_judge_a_node_far_under_the_median_is_named_whatever_its_partner_measured():
    """The noise rule drops only a dip near the threshold: at 7% of the median a node is slow, even beside a
    partner at 5% (review: 0.7 against a median of 10 went unnamed)."""
    r1 = {("n0", "n1"): 10.0, ("n2", "n3"): 0.5, ("n4", "n5"): 10.0, ("n6", "n7"): 9.9}
    r2 = {("n2", "n0"): 0.7, ("n3", "n1"): 0.5}
    v = localise.judge(r1, r2, 0.8)
    assert [s["node"] for s in v["suspects"]] == ["n2", "n3"]
