"""Unit tests of ddpdoctor/forensics/judge/nccl_timeout.py: a job that aborted on NCCL's own watchdog timeout is
judged by its watchdog lines (who is behind), in postmortem and at run-trainer's end, and is never worded as
stopped from outside. The lines are legacy ProcessGroupNCCL's and torch 2.15 nccl2's as
shared/knowledge/nccl-and-torch-2.15.md records them from the wheels (ProcessGroupNCCL.cpp's "Watchdog caught
collective operation timeout: WorkNCCL(SeqNum=..., OpType=..., Timeout(ms)=...)" and "Timeout at NCCL work";
nccl2's "NCCL operation timed out")."""
from __future__ import annotations

import pytest

from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge.classify import classify
from ddpdoctor.forensics.postmortem import trainer_run
from ddpdoctor.forensics.judge.decide import decide
from ddpdoctor.forensics.postmortem.engine import explain

LEGACY = ("[rank0]:[E1202 10:00:00 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
          "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600012 "
          "milliseconds before timing out.\n"
          "[rank0]:[E1202 10:00:00 ProcessGroupNCCL.cpp:2210] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at "
          "NCCL work: 7, last enqueued NCCL work: 7, last completed NCCL work: 6.\n"
          "[rank0]:terminate called after throwing an instance of 'c10::DistBackendError'\n"
          "[rank0]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout\n")
NCCL2 = ("[rank0]: Watchdog caught collective operation timeout: NCCL operation timed out\n"
         "[rank0]: Operation timed out after 600000 ms\n"
         "[rank0]:terminate called after throwing an instance of 'c10::DistBackendError'\n"
         "[rank0]:  what():  NCCL operation timed out\n")
# torchrun's own line when srun (or a scheduler) SIGTERMs it after a rank of the job aborted
STOPPED = "torch.distributed.elastic.agent.server.api: Received Signals.SIGTERM death signal, shutting down workers\n"


def job(tmp_path, rank0: str, rank1: str = "[rank1]: step 3\n", agent: str = STOPPED):
    logs = tmp_path / "logs"
    attempt = logs / "rid_abc" / "attempt_0"
    for r, text in ((0, rank0), (1, rank1)):
        (attempt / str(r)).mkdir(parents=True)
        (attempt / str(r) / "stderr.log").write_text(text)
    (logs / "agent.stderr.log").write_text(agent)
    return logs


def test_a_rank_without_a_timeout_line_is_the_likely_root_cause_not_a_stop_from_outside(tmp_path):
    """Rank 1's log has no NCCL timeout line: it was named as behind before; its silence is no proof (its log
    may be cut, its process gone first), so it is the likely one, not named."""
    doc = explain(job(tmp_path, LEGACY), None, [])
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["error_type"] == "likely_nccl_timeout_behind" and rc["named"] is False, rc
    assert rc["message"].startswith("likely rank(s) 1") and "no rank is named" in rc["message"]
    assert "allreduce #7" in rc["message"] and "not stopped from outside" in rc["message"]
    assert "600 s" in rc["message"] and "--hang-timeout 300" in rc["fix"]
    assert [(c["rank"], c["victim"]) for c in doc["consequences"]] == [(0, True)]
    assert "likely for rank 1" in doc["consequences"][0]["reason"]
    assert doc["culprit_ranks"] == []  # not named ...
    # ... but the Outcome lists it as the likely one, as attach and the watchdog list a likely culprit
    assert [(c["rank"], c["named"]) for c in doc["outcome"]["culprits"]] == [(1, False)]


def test_a_rank_whose_own_line_says_it_enqueued_less_is_behind(tmp_path):
    behind = ("[rank1]:[PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 6, last enqueued NCCL work: 6, "
              "last completed NCCL work: 5.\n[rank1]:terminate called after throwing an instance of "
              "'c10::DistBackendError'\n[rank1]:  what():  Watchdog caught collective operation timeout\n")
    doc = explain(job(tmp_path, LEGACY, behind, agent=""), None, [])
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["error_type"] == "nccl_timeout_behind" and "last enqueued NCCL work 6" in rc["message"]
    assert doc["culprit_ranks"] == [1] and doc["outcome"]["culprits"][0]["named"] is not False


def test_a_subgroups_timeout_is_not_compared_with_the_default_groups(tmp_path):
    """Rank 1 timed out in its subgroup's work 6 (GUID 1), rank 0 in the default group's 7: no rank is behind
    by those numbers (SeqNums are per group); rank 1 wrote a timeout line, so it is not silent either."""
    sub = ("[rank1]:[PG ID 1 PG GUID 1(tp) Rank 0] Timeout at NCCL work: 6, last enqueued NCCL work: 6, "
           "last completed NCCL work: 5.\n[rank1]:terminate called after throwing an instance of "
           "'c10::DistBackendError'\n")
    rc = explain(job(tmp_path, LEGACY, sub, agent=""), None, [])["root_cause"]
    assert rc["error_type"] != "nccl_timeout_behind" and "never reached allreduce #7" not in rc["message"], rc


@pytest.mark.parametrize("line", ["Watchdog caught collective operation timeout: NCCL operation timed out",
                                  "Operation timed out after 600000 ms"])
def test_nccl2s_timeout_lines_are_a_timeout(line):
    f = classify(RankFailure(rank=0, local_rank=0, host="h", exit_code=-6, message=f"DistBackendError: {line}"))
    assert f.category == "timeout", f.category


def test_nccl2_says_the_job_aborted_itself_and_that_its_lines_name_no_rank(tmp_path):
    rc = explain(job(tmp_path, NCCL2), None, [])["root_cause"]
    assert rc["rank"] is None and rc["error_type"] == "nccl_timeout", rc
    assert "aborted itself" in rc["message"] and "no sequence numbers" in rc["message"]
    assert "after 600 s" in rc["message"] and "stopped from outside (" not in rc["message"]


def test_run_trainers_end_keeps_the_timeout_past_a_later_stop(tmp_path):
    """run-trainer SIGTERMed (a time limit) after rank 0 had aborted on its NCCL timeout: not "interrupted"."""
    logs = job(tmp_path, LEGACY, agent="")
    outcome = decide(*trainer_run.gather(-15, "", logs, tmp_path, None, 15)[:3])
    root = outcome.record.root
    assert root["error_type"] == "likely_nccl_timeout_behind" and root["rank"] == 1, root  # rank 1: silent
    assert outcome.exit_code(15) == 143


def test_a_real_error_stays_the_root_cause(tmp_path):
    crash = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/w/train.py\", line 9, in <module>\n"
             "[rank1]: KeyError: 'labels'\n")
    doc = explain(job(tmp_path, LEGACY, crash, agent=""), None, [])
    assert doc["root_cause"]["error_type"] != "nccl_timeout_behind", doc["root_cause"]
