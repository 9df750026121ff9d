"""A live record gloo has not caught up on (evidence/lagging.py): the Lightning hang of issue 37, where the hung
rank's record still had two collectives pending that its peer had completed, while its stack stood in its
training_step; and the cases where the record keeps its word."""
from __future__ import annotations

from ddpdoctor.launch.evidence import lagging, worker_server
from ddpdoctor.launch.judge import Category, judge
from tests.unit.launch.test_judge import C10D, USER, entry, rank, stack

AUTOGRAD = "/x/site-packages/torch/autograd/graph.py"
LIGHTNING = "/x/site-packages/lightning/pytorch/core/module.py"
# every step: DDP's forward broadcast, then its gradient all_reduce inside backward (as recorded, run of issue 37)
STEPS = [entry(s, "broadcast" if s % 2 else "all_reduce") for s in range(1, 25)]
IN_BACKWARD = stack((AUTOGRAD, 979, "_engine_run_backward"), (LIGHTNING, 1137, "backward"), (USER, 48, "main"))
IN_TRAINING_STEP = stack((USER, 55, "inject"), (USER, 29, "training_step"), (USER, 48, "main"))
IN_ALL_REDUCE = stack((C10D, 3252, "all_reduce"), (USER, 29, "training_step"), (USER, 48, "main"))


def status(enqueued, completed, entries):
    return {"pg_status": {"0": {"last_enqueued_collective": str(enqueued), "last_completed_collective": str(completed)}},
            "entries": entries}


def lightning(rank1_stack, rank0_completed=23):
    """Rank 0 waits in #24 (DDP's all_reduce in backward); rank 1's record: #22 and #23 entered, 21 completed."""
    return {0: rank(status(24, rank0_completed, STEPS), IN_BACKWARD),
            1: rank(status(23, 21, STEPS[:23]), rank1_stack)}


def test_a_rank_whose_record_lags_its_peers_is_judged_by_its_stack_and_named():
    v = judge(worker_server.job(lightning(IN_TRAINING_STEP)))
    assert v.category == Category.MISSING_RANK and v.culprit_ranks == [1] and v.culprits[0].named
    assert v.culprits[0].where.line == 55


def test_a_stack_inside_a_collective_keeps_the_records_wait():
    """The rank's stack is inside a collective: it may really wait there; nothing is set aside."""
    job = worker_server.job(lightning(IN_ALL_REDUCE))
    kept = lagging.settle(job).ranks[1].wait
    assert kept == job.ranks[1].wait and kept.call.seq == 22


def test_a_collective_a_peer_has_not_completed_is_a_real_wait():
    """Rank 0 completed only #21: rank 1's #22 is as pending for it as for rank 1; the record keeps its word."""
    job = worker_server.job(lightning(IN_TRAINING_STEP, rank0_completed=21))
    assert lagging.settle(job).ranks[1].wait == job.ranks[1].wait


def test_a_member_with_no_record_keeps_the_records_wait():
    ev = lightning(IN_TRAINING_STEP)
    ev[0]["fr"] = None
    job = worker_server.job(ev)
    assert lagging.settle(job).ranks[1].wait == job.ranks[1].wait


def test_records_after_the_job_ended_are_not_settled():
    job = worker_server.job(lightning(IN_TRAINING_STEP), live=False)
    assert lagging.settle(job) is job
