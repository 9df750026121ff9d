"""The one majority vote of the judge, and its tie-break: the call new to the job."""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def majority(values: dict[int, T]) -> T | None:
    """The value more ranks hold than any other (a strict plurality); None on a tie or with nothing."""
    counts = Counter(values.values()).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def odd_ones(values: dict[int, T]) -> tuple[list[int], T | None]:
    """(the ranks whose value differs from the majority's, the majority's value); ([], None) on a tie."""
    major = majority(values)
    if major is None:
        return [], None
    return sorted(r for r, v in values.items() if v != major), major


def new_ones(values: dict[int, T], earlier: set[T]) -> list[int]:
    """On a tie: the ranks whose value appears nowhere earlier in the job (a rank-guarded `dist.barrier()` is
    new; the all_reduce the other side is in ran at every step before); none when it does not split them."""
    new = sorted(r for r, v in values.items() if v not in earlier)
    return new if 0 < len(new) < len(values) else []
