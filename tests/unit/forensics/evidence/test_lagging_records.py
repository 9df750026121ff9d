"""A live record gloo has not caught up on (evidence/lagging.py, applied where live evidence is built): the
Lightning hang of issue 37, where the hung rank's record still had two collectives pending that its peer had
completed, while its stack stood in its training_step; and the cases where the record keeps its word."""
from __future__ import annotations

from ddpdoctor.forensics.evidence import lagging, worker_server
from ddpdoctor.forensics.evidence.model import WaitKind
from ddpdoctor.forensics.judge import Category, judge
from ddpdoctor.forensics.judge.words import to_json
from tests.unit.forensics.judge.test_judge import C10D, USER, entry, rank, stack

AUTOGRAD = "/x/site-packages/torch/autograd/graph.py"
LIGHTNING = "/x/site-packages/lightning/pytorch/core/module.py"
# every step: DDP's forward broadcast, then its gradient all_reduce inside backward (as recorded, run of issue 37)
STEPS = [entry(s, "broadcast" if s % 2 else "all_reduce") for s in range(1, 25)]
IN_BACKWARD = stack((AUTOGRAD, 979, "_engine_run_backward"), (LIGHTNING, 1137, "backward"), (USER, 48, "main"))
IN_TRAINING_STEP = stack((USER, 55, "inject"), (USER, 29, "training_step"), (USER, 48, "main"))
IN_ALL_REDUCE = stack((C10D, 3252, "all_reduce"), (USER, 29, "training_step"), (USER, 48, "main"))


def status(enqueued, completed, entries, members=None):
    doc = {"pg_status": {"0": {"last_enqueued_collective": str(enqueued), "last_completed_collective": str(completed)}},
           "entries": entries}
    if members is not None:
        doc["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(members))}}
    return doc


def lightning(rank1_stack, rank0_completed=23, members=None):
    """Rank 0 waits in #24 (DDP's all_reduce in backward); rank 1's record: #22 and #23 entered, 21 completed."""
    return {0: rank(status(24, rank0_completed, STEPS, members), IN_BACKWARD),
            1: rank(status(23, 21, STEPS[:23], members), rank1_stack)}


def test_a_rank_whose_record_lags_its_peers_is_judged_by_its_stack_and_named():
    job = worker_server.job(lightning(IN_TRAINING_STEP))
    assert job.ranks[1].wait.kind == WaitKind.NONE  # in its own code, as its stack says
    assert all(c.completed for c in job.ranks[1].calls)  # #22 and #23: completed, as on rank 0
    v = judge(job)
    assert v.category == Category.MISSING_RANK and v.culprit_ranks == [1] and v.culprits[0].named
    assert v.culprits[0].where.line == 55
    doc = to_json(v, job)  # the document says what the verdict was decided on: no wait of rank 1's in #22
    assert "#22" not in str(doc["waits"].get("1")) and doc["waits"]["0"]["call"] == "all_reduce #24", doc["waits"]


def test_a_stack_inside_a_collective_keeps_the_records_wait():
    """The rank's stack is inside a collective: it may really wait there; nothing is set aside."""
    wait = worker_server.job(lightning(IN_ALL_REDUCE)).ranks[1].wait
    assert wait.kind == WaitKind.COLLECTIVE and wait.call.seq == 22


def test_a_collective_a_peer_has_not_completed_is_a_real_wait():
    """Rank 0 completed only #21: rank 1's #22 is as pending for it as for rank 1; the record keeps its word."""
    wait = worker_server.job(lightning(IN_TRAINING_STEP, rank0_completed=21)).ranks[1].wait
    assert wait.kind == WaitKind.COLLECTIVE and wait.call.seq == 22


def test_a_member_with_no_record_keeps_the_records_wait():
    """A group of three (pg_config): rank 2's flight recorder did not answer, so no one can say it completed #22."""
    ev = lightning(IN_TRAINING_STEP, members=(0, 1, 2))
    ev[2] = rank(None, IN_BACKWARD)
    wait = worker_server.job(ev).ranks[1].wait
    assert wait.kind == WaitKind.COLLECTIVE and wait.call.seq == 22
    ev[2] = rank(status(24, 23, STEPS, (0, 1, 2)), IN_BACKWARD)  # with its record, completed: set aside
    assert worker_server.job(ev).ranks[1].wait.kind == WaitKind.NONE


def test_records_after_the_job_ended_are_not_settled():
    job = worker_server.job(lightning(IN_TRAINING_STEP), live=False)
    assert lagging.settle(job) is job
