"""run-trainer shows the job's progress while it runs (issue 41 item 1): steps, or collectives for any script; on
a terminal one status line under the relayed output, redrawn; elsewhere a plain line at most every 30 s."""
from __future__ import annotations

import io

from ddpdoctor.forensics.live import pace as pace_mod
from ddpdoctor.forensics.live.pace import Pace


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_on_a_terminal_each_poll_redraws_the_steps_and_when_it_last_moved():
    shown, clock = [], Clock()
    p = Pace(show=shown.append, clock=clock)
    p.observe({0: None, 1: None}, {})  # start-up: nothing done yet, nothing shown
    assert shown == []
    clock.t += 5
    p.observe({0: 10, 1: 10}, {0: 4, 1: 3})
    clock.t += 3
    p.observe({0: 10, 1: 10}, {0: 4, 1: 3})
    assert shown == ["ddpdoctor: step 3-4 on 2 ranks · last progress 0 s ago · 0:05 elapsed",
                     "ddpdoctor: step 3-4 on 2 ranks · last progress 3 s ago · 0:08 elapsed"]
    p.observe({0: 12, 1: 11}, {})  # a user's script: no steps, its collectives
    assert shown[-1] == "ddpdoctor: 11 collectives done on every rank of 2 · last progress 0 s ago · 0:08 elapsed"


def test_on_several_nodes_the_collectives_are_this_nodes_ranks_never_every_rank_of_a_world_unread():
    """Issue 55 U3: on 3 nodes of 2 ranks each node's watchdog counts its own 2 ranks; "every rank of 2" in a
    world of 6 misread as the job's."""
    shown, clock = [], Clock()
    Pace(show=shown.append, clock=clock, nnodes=3).observe({2: 25, 3: 26}, {})
    assert shown == ["ddpdoctor: 25 collectives done on each of this node's 2 ranks (one node of 3) · "
                     "last progress 0 s ago · 0:00 elapsed"]


def test_off_a_terminal_a_plain_line_at_most_every_30_s_and_only_when_it_changed():
    said, clock = [], Clock()
    p = Pace(say=said.append, clock=clock)
    for _ in range(10):  # 10 polls 2 s apart: under 30 s, nothing said
        clock.t += 2
        p.observe({0: 5, 1: 5}, {0: 1, 1: 1})
    assert said == []
    clock.t += pace_mod.PLAIN_EVERY_S
    p.observe({0: 9, 1: 9}, {0: 2, 1: 2})
    assert said == ["ddpdoctor: step 2 on 2 ranks · last progress 0 s ago · 0:50 elapsed"]


def test_the_terminal_draws_the_status_under_each_relayed_line_and_erases_it_before_the_verdict(monkeypatch):
    from ddpdoctor.launch import run

    err, out = io.StringIO(), io.StringIO()
    monkeypatch.setattr(run.sys, "stderr", err)
    term = run.Terminal(status_on=True)
    term.status("ddpdoctor: step 3 on 2 ranks")
    term.write(out, "[default0]:step 10: loss 3.1\n")
    assert out.getvalue() == "[default0]:step 10: loss 3.1\n"
    assert err.getvalue() == "ddpdoctor: step 3 on 2 ranks\r\x1b[2Kddpdoctor: step 3 on 2 ranks"
    term.status(None)
    assert err.getvalue().endswith("\r\x1b[2K")
    off = run.Terminal(status_on=False)  # not a terminal: no status line ever drawn
    off.status("x")
    assert err.getvalue().endswith("\r\x1b[2K") and off._status is None
