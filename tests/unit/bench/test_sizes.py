"""Unit tests of ddpdoctor/bench/sizes.py."""
from __future__ import annotations

import pytest

from ddpdoctor.bench.sizes import MAX_BUFFER_BYTES, parse_size, sweep
from ddpdoctor.errors import UsageError


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


@pytest.mark.parametrize("text, needle", [("1T", "above the largest buffer"), ("9G", "above the largest buffer"),
                                          ("1e30", "above the largest buffer"), ("inf", "not a size"),
                                          ("nan", "not a size"), ("1e999", "not a size"), ("0", "positive")])
def test_sizes_are_bounded(text, needle):
    with pytest.raises(UsageError, match=needle):
        parse_size(text, "-b/--min-bytes")


def test_largest_size_is_accepted():
    assert parse_size("8G") == MAX_BUFFER_BYTES
