"""Unit tests of ddpdoctor/forensics/evidence/nccl_watchdog.py: NCCL's own timeout lines as evidence. The lines
are legacy ProcessGroupNCCL's wording (``WorkNCCL(SeqNum=..., OpType=..., Timeout(ms)=...)``, "Timeout at NCCL
work: N, last enqueued NCCL work: N, last completed NCCL work: N") and torch 2.15 nccl2's ("NCCL operation timed
out"), as shared/knowledge/nccl-and-torch-2.15.md records them from the wheels."""
from __future__ import annotations

from ddpdoctor.forensics.evidence import nccl_watchdog as wd

R0 = ("[rank0]:[E1202 10:00:00 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600012 milliseconds "
      "before timing out.\n"
      "[rank0]:[E1202 10:00:00 ProcessGroupNCCL.cpp:2210] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL "
      "work: 7, last enqueued NCCL work: 7, last completed NCCL work: 6.\n")
R1 = ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 6, last enqueued NCCL work: 6, last completed "
      "NCCL work: 6.\n")


def test_a_legacy_timeout_and_its_progress_line_are_one_fact():
    [t] = wd.parse(R0)
    assert (t.rank, t.backend, t.seq, t.op, t.timeout_ms, t.ran_ms, t.enqueued, t.completed) == \
        (0, "nccl", 7, "allreduce", 600000, 600012, 7, 6)


def test_the_rank_that_never_enqueued_the_work_is_behind():
    found = wd.behind({0: wd.parse(R0), 1: wd.parse(R1), 2: wd.parse(R0.replace("Rank 0", "Rank 2"))}, [0, 1, 2])
    assert found.seq == 7 and found.behind == (1,) and found.timed_out == (0, 2) and found.aborted_itself


def test_a_silent_rank_is_only_the_likely_one():
    """It was named "behind" before: a rank that wrote no timeout line proves nothing (its log cut, its process
    gone first); only a rank's own line ("last enqueued NCCL work" below the work) names it."""
    found = wd.behind({0: wd.parse(R0)}, [0, 1])
    assert found.behind == () and found.likely == (1,) and found.timed_out == (0,) and found.group == "0"


# A subgroup's lines: its SeqNums count its own works (GUID 1), not the default group's.
SUB = ("[rank{r}]:[PG ID 1 PG GUID 1(tp) Rank {g}] Timeout at NCCL work: {s}, last enqueued NCCL work: {e}, "
       "last completed NCCL work: 2.\n")


def test_lines_of_different_process_groups_are_never_compared():
    """Rank 1 timed out in the subgroup's work 3, ranks 0 and 2 in the default group's 7: 3 < 7 is no lag."""
    r1 = SUB.format(r=1, g=0, s=3, e=3)
    found = wd.behind({0: wd.parse(R0, 0), 1: wd.parse(r1, 1), 2: wd.parse(R0.replace("Rank 0", "Rank 2"), 2)},
                      [0, 1, 2])
    assert found.behind == () and 1 not in found.timed_out and found.group == "0"
    assert found.likely == ()  # rank 1 wrote a timeout line (in another group): not silent


def test_within_a_subgroup_the_rank_that_enqueued_less_is_behind_and_no_silent_rank_is_likely():
    lines = {1: SUB.format(r=1, g=0, s=3, e=3), 3: SUB.format(r=3, g=1, s=2, e=2)}
    found = wd.behind({r: wd.parse(t, r) for r, t in lines.items()}, [0, 1, 2, 3])
    assert (found.group, found.seq, found.behind, found.timed_out) == ("1", 3, (3,), (1,))
    alone = wd.behind({1: wd.parse(lines[1], 1)}, [0, 1, 2, 3])
    assert alone.likely == () and alone.behind == ()  # who else is in "tp" the lines do not say


def test_lines_that_name_no_group_are_not_compared():
    bare = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n")
    found = wd.behind({0: wd.parse(bare.format(r=0, s=7), 0), 1: wd.parse(bare.format(r=1, s=5), 1)}, [0, 1, 2])
    assert found.behind == () and found.likely == () and found.timed_out == (0, 1) and found.group is None


def test_nccl2_says_who_timed_out_but_not_where():
    text = ("[rank1]: Watchdog caught collective operation timeout: NCCL operation timed out\n"
            "[rank1]: Operation timed out after 600000 ms\n")
    [t] = wd.parse(text, rank=1)
    assert (t.rank, t.backend, t.seq, t.ran_ms) == (1, "nccl2", None, 600000)
    found = wd.behind({1: [t]}, [0, 1])
    assert found.behind == () and found.timed_out == (1,) and found.seq is None and found.aborted_itself


def test_no_timeout_no_finding():
    assert wd.parse("loss 0.5\nRuntimeError: boom\n") == [] and wd.behind({0: []}, [0, 1]) is None


def test_the_logs_global_rank_not_the_lines_group_rank():
    """"[PG ID 1 PG GUID 1 Rank 1]" in global rank 5's log (a subgroup: its rank 1 there) is rank 5's timeout."""
    line = ("[rank5]:[PG ID 1 PG GUID 1 Rank 1] Timeout at NCCL work: 3, last enqueued NCCL work: 3, "
            "last completed NCCL work: 2.\n")
    assert [t.rank for t in wd.parse(line, 5)] == [5] and [t.rank for t in wd.parse(line)] == [1]
