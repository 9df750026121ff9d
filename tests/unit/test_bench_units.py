"""nccl-bench's pure parts: busbw definitions against hand-computed nccl-tests figures, sizes, localisation."""
from __future__ import annotations

import pytest

from ddpdoctor.bench import localise
from ddpdoctor.bench.harness import summary
from ddpdoctor.bench.ops import OPS, algbw_gbs, busbw_gbs
from ddpdoctor.bench.render import row_line
from ddpdoctor.bench.sizes import parse_size, sweep
from ddpdoctor.errors import UsageError

# S = 1e9 bytes in 1 s: algbw 1 GB/s; busbw by hand from nccl-tests' PERFORMANCE.md.
HAND = {
    "all_reduce": {1: 0.0, 2: 1.0, 3: 4 / 3, 8: 1.75},
    "all_gather": {1: 0.0, 2: 0.5, 3: 2 / 3, 8: 0.875},
    "reduce_scatter": {1: 0.0, 2: 0.5, 3: 2 / 3, 8: 0.875},
    "all_to_all": {1: 0.0, 2: 0.5, 3: 2 / 3, 8: 0.875},
    "broadcast": {1: 1.0, 2: 1.0, 3: 1.0, 8: 1.0},
    "sendrecv": {1: 1.0, 2: 1.0, 3: 1.0, 8: 1.0},
}


@pytest.mark.parametrize("op", sorted(HAND))
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_busbw_matches_nccl_tests(op, n):
    assert busbw_gbs(op, 10**9, 1.0, n) == pytest.approx(HAND[op][n])
    assert busbw_gbs(op, 10**9, 0.5, n) == pytest.approx(2 * HAND[op][n])


def test_algbw_and_bytes_moved_definitions():
    assert algbw_gbs(2 * 10**9, 2.0) == pytest.approx(1.0)
    # all_gather: S counts the whole output buffer; count is per rank (4 bytes each, 8 ranks).
    ag = OPS["all_gather"]
    assert ag.count(1 << 20, 4, 8) == 32768 and ag.bytes_moved(32768, 4, 8) == 1 << 20
    a2a = OPS["all_to_all"]
    assert a2a.count(1 << 20, 4, 8) == 32768 and a2a.bytes_moved(32768, 4, 8) == 1 << 20
    ar = OPS["all_reduce"]
    assert ar.count(1 << 20, 2, 8) == 1 << 19 and ar.bytes_moved(1 << 19, 2, 8) == 1 << 20
    # a size that does not split evenly is rounded down to whole elements per rank
    assert ag.count(1000, 4, 3) == 83 and ag.bytes_moved(83, 4, 3) == 996


@pytest.mark.parametrize("text,value", [("8", 8), ("64K", 65536), ("128M", 128 << 20), ("1G", 1 << 30),
                                        ("2MiB", 2 << 20), ("0.5K", 512)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["0", "-4M", "lots", "", "12Q"])
def test_bad_sizes(text):
    with pytest.raises(UsageError):
        parse_size(text, "-b")


def test_sweep_like_nccl_tests():
    assert sweep(8, 64, 2) == [8, 16, 32, 64]
    assert sweep(1 << 20, 5 << 20, 2) == [1 << 20, 2 << 20, 4 << 20, 5 << 20]
    assert sweep(64, 64, 2) == [64]
    with pytest.raises(UsageError, match="above"):
        sweep(128, 64, 2)
    with pytest.raises(UsageError, match="above 1"):
        sweep(8, 64, 1.0)


def test_summary_counts_wrong_and_averages_every_column():
    rows = [{"op": "all_reduce", "in_place": {"busbw_gbs": 2.0, "wrong": 0}, "out_of_place": None},
            {"op": "all_gather", "in_place": {"busbw_gbs": 1.0, "wrong": 3}, "out_of_place": {"busbw_gbs": 3.0, "wrong": 1}}]
    s = summary(rows)
    assert s["wrong"] == 4 and s["avg_busbw_gbs"] == pytest.approx(2.0)
    assert s["by_op"]["all_gather"]["avg_busbw_gbs"] == pytest.approx(2.0)


def test_row_line_has_nccl_tests_columns():
    line = row_line({"size": 1048576, "count": 262144, "dtype": "float32", "redop": "sum", "root": -1,
                     "out_of_place": None, "in_place": {"time_us": 10.5, "algbw_gbs": 99.86, "busbw_gbs": 174.76, "wrong": 0}})
    cols = line.split()
    assert cols[:5] == ["1048576", "262144", "float32", "sum", "-1"] and cols[5] == "n/a"
    assert cols[6:] == ["10.5", "99.86", "174.76", "0"]


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
