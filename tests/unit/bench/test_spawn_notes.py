"""Naming the rank a failed nccl-bench waited for, from the ranks' notes (which collective each entered) and
heartbeats (when each was last alive): pure reads of the progress directory."""
from __future__ import annotations

import json

from ddpdoctor.bench.spawn import ranks_behind


def notes(tmp_path, steps: dict[int, int], beats: dict[int, float] | None = None):
    for rank, step in steps.items():
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "host": f"h{rank}", "op": "all_reduce", "size": 1 << 20, "step": step}))
    for rank, t in (beats or {}).items():
        (tmp_path / f"rank{rank}.beat").write_text(json.dumps({"rank": rank, "host": f"h{rank}", "pid": 1, "t": t}))
    return str(tmp_path)


def test_a_rank_that_never_entered_the_collective_is_named(tmp_path):
    text = ranks_behind(notes(tmp_path, {0: 5, 1: 4, 2: 5}, {0: 100.0, 1: 100.0, 2: 100.0}))
    assert text.startswith("rank 1 on h1 stopped answering: the others entered all_reduce 1048576 B"), text


def test_a_rank_frozen_inside_the_collective_is_named_by_its_heartbeat(tmp_path):
    """Every rank entered the same collective; rank 1's heartbeat stopped 20 s before the others' (SIGSTOP)."""
    text = ranks_behind(notes(tmp_path, {0: 5, 1: 5, 2: 5}, {0: 120.0, 1: 100.0, 2: 119.5}))
    assert text.startswith("rank 1 on h1 stopped answering during all_reduce 1048576 B: no sign of life for 20 s")
    assert "SIGSTOP" in text


def test_no_rank_is_blamed_when_the_heartbeats_agree(tmp_path):
    """A rank that died (killed, crashed) is torch's own first failure; the ones that waited beat until then."""
    assert ranks_behind(notes(tmp_path, {0: 5, 1: 5, 2: 5}, {0: 120.0, 1: 119.2, 2: 120.0})) == ""
    assert ranks_behind(notes(tmp_path, {0: 5, 1: 5, 2: 5})) == ""  # no heartbeat at all: nothing to say


def test_the_heartbeats_kept_at_teardown_win_over_the_files(tmp_path):
    """The frozen rank is woken (SIGCONT) to obey torch's SIGTERM and may beat once more: the beats read
    before that are the ones judged."""
    where = notes(tmp_path, {0: 5, 1: 5}, {0: 120.0, 1: 121.0})
    kept = [{"rank": 0, "host": "h0", "pid": 1, "t": 120.0}, {"rank": 1, "host": "h1", "pid": 2, "t": 100.0}]
    assert ranks_behind(where, kept).startswith("rank 1 on h1 stopped answering during")
