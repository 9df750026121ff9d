"""A stop on request (SIGTERM/SIGINT to run-trainer) against the hang watchdog and the post-mortem: the ranks the
stop ends one by one leave the others waiting, and that is reported as the interruption, never as a hang (seen in
CI: a SIGINT read as rank 0's hang from the flight records the stop itself wrote)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from ddpdoctor.forensics.live import hang
from ddpdoctor.forensics.judge import end_rules
from ddpdoctor.launch.signals import StopOnSignal


class _Agent:
    pid = 0

    def poll(self):
        return None


def _dog(tmp_path) -> hang.Watchdog:
    return hang.Watchdog(_Agent(), tmp_path, tmp_path, timeout=None)


def test_a_report_judged_after_the_stop_request_is_dropped(tmp_path):
    dog = _dog(tmp_path)
    dog.report, dog.judged_at = {"verdict": {"class": "outside_collectives"}}, 100.0
    assert dog.report_before(None) is dog.report  # no stop request: the report stands
    assert dog.report_before(150.0) is dog.report  # judged before the signal: a real hang, kept
    assert dog.report_before(50.0) is None  # judged after it: the stop's own doing
    dog.report = None
    assert dog.report_before(150.0) is None


def test_the_signal_makes_the_watchdog_stand_down_whenever_it_comes(tmp_path):
    # before the watchdog exists: it stands down as soon as it is watched
    early = StopOnSignal()
    early._on_signal(signal.SIGINT, None)
    assert early.signum == signal.SIGINT and early.at is not None
    dog = _dog(tmp_path)
    early.watch(dog)
    assert dog._standing_down.is_set() and dog._stop.is_set()
    # after: the handler itself stands it down, and a second signal changes nothing
    stop, dog2 = StopOnSignal(), _dog(tmp_path)
    stop.watch(dog2)
    assert not dog2._standing_down.is_set()
    stop._on_signal(signal.SIGTERM, None)
    first_at = stop.at
    stop._on_signal(signal.SIGINT, None)
    assert dog2._standing_down.is_set() and stop.signum == signal.SIGTERM and stop.at == first_at


def test_a_standing_down_watchdog_judges_nothing_even_with_early_evidence(tmp_path):
    agent = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    agent.wait()
    dog = hang.Watchdog(agent, tmp_path, tmp_path, timeout=None, poll=0.05)
    dog.early = {"evidence": {0: {}}, "deadline": time.time(), "timeout": 15.0, "at": time.time(), "after": 0,
                 "waited_s": 1.0}
    dog.stand_down()
    dog._run()  # returns at once: stopped, and the job's failed end is not read as its own timeout
    assert dog.report is None and dog.judged_at is None


def test_a_stop_s_own_marks_never_pass_for_the_failure_that_came_before_it():
    def root(category, victim=False):
        return {"category": category, "victim": victim}

    for category in ("hang", "peer_lost", "signal", "stopped", "unknown", "consequence"):
        assert not end_rules.said_before(root(category)), category
    assert end_rules.said_before(root("exception"))  # a real error before the signal stays the root cause
    assert end_rules.said_before({"category": "signal", "victim": False, "signal": "SIGSEGV"})  # a crash of its own
    assert not end_rules.said_before({"category": "signal", "victim": False, "signal": "SIGTERM"})
    assert not end_rules.said_before(root("exception", victim=True))
    assert not end_rules.said_before(None)


def test_torchrun_killed_from_outside_is_named_as_such(tmp_path):
    """torchrun SIGKILLed (its ranks die with it, none leaves a record): the root cause says who died of what,
    not 'read torchrun's own output' (a SIGKILLed torchrun wrote nothing about it)."""
    killed = end_rules.agent_failure(-9, "I1123 starting workers\n", str(tmp_path))
    assert killed["category"] == "signal" and killed["signal"] == "SIGKILL"
    assert "torchrun (the launcher) was killed by SIGKILL" in killed["message"] and "dmesg" in killed["fix"]
    plain = end_rules.agent_failure(1, "some error\n", str(tmp_path))
    assert "exited with code 1" in plain["message"] and "agent.stderr.log" in plain["fix"]


def test_the_hang_threshold_named_beside_the_users_timeout_is_the_one_that_stood_when_the_evidence_was_taken(tmp_path):
    """A SIGSTOPped rank under a 30 s process-group timeout read 'comes before the hang threshold (135.0 s)': the
    timeout's own completion (gloo counts it completed) made a 27 s "gap" that the threshold then calibrated on."""
    from unittest import mock

    dog = _dog(tmp_path)
    for t in range(8):  # a job stepping every second: calibrated at the 30 s floor
        dog.threshold.progressed(1000.0 + t)
    with mock.patch.object(hang, "workers", return_value=[]), \
            mock.patch.object(dog, "collect", return_value={0: {"host": "h", "state": "running", "fr": None}}), \
            mock.patch("ddpdoctor.forensics.evidence.worker_client.pending_deadline", return_value=(1100.0, 30.0)):
        dog.last_fr = {0: {}}
        dog.early = dog.before_timeout(1097.0)
        assert dog.early is not None
        dog.threshold.progressed(1100.5)  # the timeout itself completing the collective: a 93 s gap
        report = dog.from_early(stop=False)
    assert report["threshold"]["seconds"] == 30.0 and "hang limit (30.0 s)" in report["threshold"]["why"], report


def test_a_live_hang_verdict_names_the_culprit_s_local_rank():
    """The watchdog reads LOCAL_RANK from each rank's process: the panel no longer says 'local rank —'."""
    report = {"stalled_s": 12.0, "threshold": {"seconds": 10, "source": "--hang-timeout"}, "stacks": {},
              "local_ranks": {"1": 1, "3": 1, "0": 0},
              "verdict": {"class": "missing_rank", "summary": "rank(s) 3 never entered all_reduce #4", "fix": "f",
                          "culprits": [{"rank": 3, "host": "n1", "where": "/u/t.py:9"}],
                          "consequences": [{"rank": 0, "host": "n0"}], "collective": {"op": "all_reduce", "seq": 4}}}
    root = end_rules.hang_root_cause(report)
    assert root["rank"] == 3 and root["local_rank"] == 1
    assert [(c["rank"], c["local_rank"]) for c in end_rules.hang_consequences(report)] == [(0, 0)]
    assert end_rules.hang_root_cause({**report, "local_ranks": {}})["local_rank"] is None  # older documents


def test_a_verdict_with_no_culprit_gives_its_waiters_no_empty_rank_list():
    """A cycle or a tie names no culprit: each waiter says where it waited, never "for rank(s)  at"."""
    report = {"stalled_s": 12.0, "threshold": {"seconds": 10, "source": "--hang-timeout"}, "stacks": {},
              "verdict": {"class": "no_culprit", "summary": "no culprit named", "fix": "f", "culprits": [],
                          "consequences": [{"rank": 0, "host": "n0", "where": "/u/t.py:3",
                                            "waited_in": "init_process_group"}]}}
    (c,) = end_rules.hang_consequences(report)
    assert c["reason"] == "waited in init_process_group at /u/t.py:3", c
