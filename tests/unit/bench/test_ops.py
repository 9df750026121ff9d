"""Unit tests of ddpdoctor/bench/ops.py."""
from __future__ import annotations

import pytest

from ddpdoctor.bench.ops import OPS, algbw_gbs, busbw_gbs

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


def test_unmeasurable_names_the_ops_whose_sizes_hold_no_element():
    from ddpdoctor.bench.ops import unmeasurable

    assert unmeasurable(["all_reduce", "all_gather"], [8, 1024], "float32", 4) == []
    assert unmeasurable(["all_reduce"], [3], "float32", 2) == [
        "all_reduce needs -e/--max-bytes of at least 4 B (one float32 element), not 3 B"]
    # whole-buffer ops split the message across the ranks: 8 B is one float32 per rank only up to 2 ranks
    assert unmeasurable(["all_gather", "broadcast"], [8], "float32", 4) == [
        "all_gather needs -e/--max-bytes of at least 16 B (one float32 element per rank, 4 ranks), not 8 B"]
    assert unmeasurable(["sendrecv"], [1 << 20], "float32", 1) == ["sendrecv needs at least 2 ranks (this run has 1)"]
