"""Unit tests of ddpdoctor/cluster/budget.py."""
from __future__ import annotations

import time

import pytest

from ddpdoctor.cluster.budget import SLACK_S, Budget


def test_budget_is_two_timeouts_plus_slack_and_caps_the_collective():
    b = Budget(10.0, start=time.monotonic())
    assert b.total_s == 20 + SLACK_S
    assert b.meet_by - b.start == pytest.approx(10)  # floats: 16390.483864435002 - 16380.483864435 != 10
    assert b.collective_limit(300) <= b.total_s - 8
    late = Budget(10.0, start=time.monotonic() - 40)
    assert late.collective_limit(30) == 0.0 and late.left() == 0.0
