"""decide()'s rules on a finished job, in their one order (judge/decide.py ``_finished``): the dumps alone, a rank's
own failure over the watchdog's hang, a failure said before a stop on request over the stop, attach's saved word
only where the logs name no rank, and no pass without evidence of a normal end."""
from __future__ import annotations

import signal
from dataclasses import dataclass

from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge import dumps as dumps_judge
from ddpdoctor.forensics.judge.decide import Context, Evidence, Failures, decide
from ddpdoctor.forensics.judge.outcome import Category, State
from ddpdoctor.forensics.judge.verdict import Findings
from tests.unit.forensics.judge.test_attribution import dumps, entry, fr

HIST = [entry(s) for s in range(1, 4)]


def behind_rank_1():
    """Three ranks' dumps: ranks 0 and 2 wait in all_reduce #4, rank 1 completed #3 and never entered #4."""
    return dumps_judge.judge_dumps(dumps({0: fr(4, 3, HIST + [entry(4)]), 1: fr(3, 3, HIST),
                                          2: fr(4, 3, HIST + [entry(4)])}))


def exception(rank: int) -> RankFailure:
    return RankFailure(rank=rank, local_rank=rank, host="n1", exit_code=1, category="exception",
                       error_type="ValueError", message="bad batch", location="/home/u/train.py:40")


def test_dumps_alone_name_the_rank_behind_and_fail_the_job():
    hang = behind_rank_1()
    outcome = decide(Evidence(dumps=hang, ranks=(0, 1, 2)), Failures(findings=Findings(root_cause=None)),
                     Context("postmortem", logs=False))
    assert outcome.state is State.HANG and outcome.category is Category.MISSING_RANK, outcome
    assert outcome.culprit_ranks == [1] and outcome.record.root["rank"] == 1
    assert outcome.exit_code() == 1


def test_dumps_alone_that_name_no_rank_are_not_verified():
    same = dumps_judge.judge_dumps(dumps({r: fr(3, 3, HIST) for r in (0, 1, 2)}))
    outcome = decide(Evidence(dumps=same, ranks=(0, 1, 2)), Failures(findings=Findings(root_cause=None)),
                     Context("postmortem", logs=False))
    assert outcome.state is State.UNVERIFIED and outcome.culprits == () and outcome.exit_code() == 5
    assert outcome.record.root["error_type"] == "not_verified" and "rank(s) 0-2" in outcome.record.root["message"]


def test_without_logs_read_the_same_dumps_do_not_pass_and_with_logs_they_only_attribute():
    """The dumps-alone rule is for a postmortem given no logs: with logs that hold no failure the end is not
    verified (no evidence of a normal end), the dumps never make a failure out of nothing."""
    outcome = decide(Evidence(dumps=behind_rank_1(), ranks=(0, 1, 2)), Failures(findings=Findings(root_cause=None)),
                     Context("postmortem"))
    assert outcome.state is State.UNVERIFIED and outcome.culprits == ()


def test_a_rank_that_failed_of_its_own_stays_the_cause_over_the_watchdogs_hang():
    report = {"verdict": {"category": "missing_rank", "culprits": [{"rank": 0}], "summary": "rank 0 missing"},
              "stalled_s": 40.0, "threshold": {"seconds": 30, "source": "calibrated"}, "stacks": {}}
    outcome = decide(Evidence(watchdog=report), Failures(findings=Findings(root_cause=exception(1))),
                     Context("run-trainer", failed=True))
    assert outcome.state is State.FAIL and outcome.category is Category.EXCEPTION and outcome.culprit_ranks == [1]


def test_the_watchdogs_hang_is_the_cause_over_a_rank_it_stopped():
    report = {"verdict": {"category": "missing_rank", "culprits": [{"rank": 0, "where": "/home/u/train.py:9"}],
                          "summary": "rank 0 never entered all_reduce #4"},
              "stalled_s": 40.0, "threshold": {"seconds": 30, "source": "calibrated"}, "stacks": {}}
    killed = RankFailure(rank=1, local_rank=1, host="n1", exit_code=-9, signal="SIGKILL", category="signal")
    outcome = decide(Evidence(watchdog=report), Failures(findings=Findings(root_cause=killed)),
                     Context("run-trainer", failed=True))
    assert outcome.state is State.HANG and outcome.category is Category.MISSING_RANK
    assert outcome.culprit_ranks == [0] and outcome.culprits[0].where == "/home/u/train.py:9"
    assert outcome.record.consequences[0]["rank"] == 1 and outcome.record.consequences[0]["victim"]


def test_a_failure_said_before_a_stop_on_request_stays_the_cause():
    outcome = decide(Evidence(), Failures(findings=Findings(root_cause=exception(1))),
                     Context("run-trainer", failed=True, interrupted=signal.SIGTERM))
    assert outcome.state is State.FAIL and outcome.culprit_ranks == [1]
    assert outcome.exit_code(signal.SIGTERM) == 128 + signal.SIGTERM


def test_a_stop_on_request_with_nothing_said_before_is_interrupted():
    outcome = decide(Evidence(), Failures(findings=Findings(root_cause=None)),
                     Context("run-trainer", failed=True, interrupted=signal.SIGINT))
    assert outcome.state is State.INTERRUPTED and outcome.culprits == ()


@dataclass
class Saved:
    """attach's verdict saved while the job hung (postmortem/known.AttachVerdict's shape: what decide reads)."""
    diagnosis: dict

    def root_cause(self, stop_signal):
        return RankFailure(rank=5, local_rank=None, host="node3", exit_code=None, category="hang",
                           message="attach: rank 5 never entered all_reduce", location="train.py:34")


def test_attachs_saved_word_only_where_the_logs_name_no_rank():
    saved = Saved({"category": "missing_rank", "culprits": [{"rank": 5, "where": "train.py:34"}]})
    told = decide(Evidence(attached=saved), Failures(findings=Findings(root_cause=None)), Context("postmortem"))
    assert told.culprit_ranks == [5] and "attach_saved_verdict" in told.evidence
    kept = decide(Evidence(attached=saved), Failures(findings=Findings(root_cause=exception(1))),
                  Context("postmortem"))
    assert kept.culprit_ranks == [1] and "attach_saved_verdict" not in kept.evidence


def test_nothing_failed_and_no_normal_end_is_unverified_and_a_normal_end_passes():
    unverified = decide(Evidence(ranks=(0, 1)), Failures(findings=Findings(root_cause=None)), Context("postmortem"))
    assert unverified.state is State.UNVERIFIED and "2 rank(s)" in unverified.record.root["message"]
    passed = decide(Evidence(ranks=(0, 1)), Failures(findings=Findings(root_cause=None)),
                    Context("postmortem", normal_end=True))
    assert passed.state is State.PASS and passed.category is Category.NORMAL_END and passed.exit_code() == 0


def test_a_rank_the_records_name_only_as_likely_is_the_outcomes_likely_culprit():
    """One convention for "likely" in the Outcome: a culprit whose Place is not named, whichever rule said it (the
    logs' likely missing rank had named=True, the NCCL-silent rank was left out of the culprits)."""
    for named in (None, False):
        root = RankFailure(rank=2, local_rank=None, host="n2", exit_code=None, category="hang",
                           error_type="likely_missing_rank", message="likely rank 2: ...", named=named)
        outcome = decide(Evidence(), Failures(findings=Findings(root_cause=root)), Context("postmortem"))
        assert [(c.rank, c.named) for c in outcome.culprits] == [(2, False)], (named, outcome.culprits)
