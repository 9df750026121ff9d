"""judge/failure_words.py: every shape of a rank's own failure has its category and its fix in one table, and
classify's rules name shapes, never words of their own."""
from __future__ import annotations

import string

import pytest

from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge import classify
from ddpdoctor.forensics.judge.failure_words import WORDS, Shape, category_of, fix_of
from ddpdoctor.forensics.judge.outcome import Category


def test_every_shape_has_a_category_and_a_fix():
    assert set(WORDS) == set(Shape)
    for shape, (category, fix) in WORDS.items():
        assert isinstance(category, Category) and fix.strip(), shape


def test_every_rule_names_a_shape_of_the_table():
    assert classify.RULES == classify.OWN_RULES + classify.AFTER_PEER_RULES
    assert all(isinstance(shape, Shape) for shape, _ in classify.RULES)


FIELDS = {Shape.USAGE: {"prog"}, Shape.ABORTED: {"type", "at"}, Shape.SIGNAL: {"signal"},
          Shape.EXCEPTION_AT: {"what", "location"}, Shape.EXCEPTION: {"what"}}


@pytest.mark.parametrize("shape", list(Shape))
def test_a_fix_asks_only_for_the_fields_its_shape_fills(shape):
    asked = {name for _, name, _, _ in string.Formatter().parse(WORDS[shape][1]) if name}
    assert asked == FIELDS.get(shape, set()), shape


def test_a_value_with_braces_is_said_as_it_is():
    said = fix_of(Shape.EXCEPTION_AT, what="KeyError('{x}')", location="train.py:3")
    assert said.startswith("KeyError('{x}') raised at train.py:3 ended this rank")


def test_one_category_two_shapes_two_fixes():
    """A wrong device ordinal and a kernel's CUDA error are both `cuda`, each with its own fix (before: two fixes
    written beside two patterns of one category)."""
    assert category_of(Shape.WRONG_DEVICE) == category_of(Shape.CUDA_ERROR) == "cuda"
    ordinal = classify.classify(RankFailure(rank=1, local_rank=1, host="n1", exit_code=1, message="RuntimeError: CUDA error: invalid device "
                                                                         "ordinal"))
    kernel = classify.classify(RankFailure(rank=1, local_rank=1, host="n1", exit_code=1, message="RuntimeError: CUDA error: an illegal memory "
                                                                        "access was encountered"))
    assert ordinal.category == kernel.category == "cuda"
    assert ordinal.fix == fix_of(Shape.WRONG_DEVICE) and "LOCAL_RANK" in ordinal.fix
    assert kernel.fix == fix_of(Shape.CUDA_ERROR) and "CUDA_LAUNCH_BLOCKING=1" in kernel.fix
