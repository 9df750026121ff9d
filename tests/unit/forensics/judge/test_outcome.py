"""The one Outcome (judge/outcome.py) and the one decide() (judge/decide.py), issue 53 items 1 and 2: every
collector's findings become the same typed answer, the state table gives the verdict word and the exit code, and
the same hung job reads the same from the live watchdog, run-trainer's end, postmortem and attach."""
from __future__ import annotations

import pytest

from ddpdoctor.exitcodes import ExitCode
from ddpdoctor.forensics.judge.decide import Context, Evidence, Failures, decide
from ddpdoctor.forensics.judge.outcome import STATE_TABLE, Category, State
from ddpdoctor.forensics.judge.verdict import Category as VerdictCategory

HANG = {"category": "missing_rank", "culprits": [{"rank": 1, "host": "node2", "node": "n2", "where": "train.py:42",
                                                  "function": "load_batch"}],
        "named": [1], "likely_culprits": [], "waiting": [0], "evidence": ["graph"],
        "consequences": [{"rank": 0, "host": "node1", "where": "train.py:50"}]}
HANG_ROOT = {"rank": 1, "local_rank": 1, "host": "node2", "exit_code": None, "category": "hang",
             "location": "train.py:42", "reason": ""}
WAITER = {"rank": 0, "local_rank": 0, "host": "node1", "exit_code": None, "category": "hang", "victim": True,
          "location": "train.py:50", "reason": "waited in all_reduce #15 for rank(s) 1"}


def test_the_same_hung_job_is_one_outcome_from_every_collector():
    threshold = {"seconds": 8.0, "source": "--hang-timeout", "why": "set by --hang-timeout"}
    live = decide(Evidence(verdict=HANG), Failures(culprit_ranks=(1,)), Context("live", failed=True, threshold=threshold, hung=True))
    trainer = decide(Evidence(verdict=HANG), Failures.of(HANG_ROOT, [WAITER], [1]), Context("run-trainer", failed=True,
                                                                          threshold=threshold))
    postmortem = decide(Evidence(verdict=HANG), Failures.of(HANG_ROOT, [WAITER], [1]), Context("postmortem", failed=True))
    attach = decide(Evidence(verdict=HANG), Failures(), Context("attach", failed=True))
    for outcome in (live, trainer, postmortem, attach):
        assert (outcome.state, outcome.category) == (State.HANG, Category.MISSING_RANK), outcome
        assert [(c.rank, c.host, c.where, c.function) for c in outcome.culprits] == \
            [(1, "node2", "train.py:42", "load_batch")]
        assert outcome.verdict == "fail" and outcome.exit_code() == 1
    assert trainer.threshold.seconds == 8.0 and trainer.threshold.source.value == "--hang-timeout"
    assert [c.rank for c in trainer.consequences] == [0] and not trainer.consequences[0].named


@pytest.mark.parametrize("context,failures,state,category", [
    (Context("postmortem", normal_end=True), Failures(), State.PASS, Category.NORMAL_END),
    (Context("postmortem"), Failures(), State.UNVERIFIED, Category.UNKNOWN),
    (Context("attach", motion="progressing"), Failures(), State.PROGRESSING, Category.PROGRESSING),
    (Context("attach", motion="no_movement", busy=(1,)), Failures(), State.UNDECIDED, Category.COMPUTING),
    (Context("attach", motion="no_movement"), Failures(), State.UNDECIDED, Category.NO_MOVEMENT),
    (Context("run-trainer", failed=True, interrupted=15),
     Failures.of({"rank": None, "local_rank": None, "host": "h", "exit_code": 143, "category": "interrupted"}, [], []),
     State.INTERRUPTED, Category.INTERRUPTED),
    (Context("postmortem", failed=True),
     Failures.of({"rank": 1, "local_rank": 1, "host": "h", "exit_code": 1, "category": "exception",
                  "location": "crash.py:7"}, [], [1]), State.FAIL, Category.EXCEPTION),
])
def test_each_state(context, failures, state, category):
    outcome = decide(Evidence(), failures, context)
    assert (outcome.state, outcome.category) == (state, category)


def test_a_crash_names_the_rank_at_its_line():
    root = {"rank": 1, "local_rank": 1, "host": "h", "exit_code": 1, "category": "exception", "location": "crash.py:7"}
    outcome = decide(Evidence(), Failures.of(root, [], [1]), Context("postmortem", failed=True))
    assert [(c.rank, c.where) for c in outcome.culprits] == [(1, "crash.py:7")]
    assert outcome.to_json()["culprits"][0]["where"] == "crash.py:7"


def test_waiting_on_a_busy_rank_is_undecided_never_a_hang():
    outcome = decide(Evidence(verdict={"waiting": [0]}), Failures(), Context("attach", motion="no_movement", busy=(1,)))
    assert outcome.state is State.UNDECIDED and outcome.category is Category.WAITING_ON_BUSY
    assert outcome.verdict == "warn" and outcome.exit_code() == 0 and outcome.culprits == ()


def test_the_state_table_gives_every_state_a_verdict_and_an_exit_code():
    assert set(STATE_TABLE) == set(State)
    assert STATE_TABLE[State.UNVERIFIED] == ("warn", ExitCode.NOT_VERIFIED)
    assert decide(Evidence(), Failures.of({"rank": None, "local_rank": None, "host": "h", "exit_code": 143,
                                     "category": "interrupted"}, [], []),
                  Context("run-trainer", failed=True, interrupted=15)).exit_code(15) == 143


def test_one_category_vocabulary():
    """The judge's verdict, a rank's failure classes and the words all use judge/outcome.Category."""
    from ddpdoctor.forensics.judge import classify
    from ddpdoctor.report import wording

    assert VerdictCategory is Category
    assert {classify.category_of(rule[0]) for rule in classify.RULES} <= {c.value for c in Category}
    worded = set(wording.CATEGORY) | set(wording.KIND)
    assert {c.value for c in Category} <= worded, {c.value for c in Category} - worded  # every value has its words
