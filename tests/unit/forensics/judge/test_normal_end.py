"""Issue 45 item 3: postmortem never says "pass" without evidence that the job ended normally. A rank's logs end
the same way when its script returned and when a scheduler's SIGTERM (to every process of the step at once) or
the OOM killer's SIGKILL ended it, and no error file is written for a signal: such a log dir is "not verified"
(exit 5); torchrun's own word (LOGLEVEL=INFO: its worker group SUCCEEDED) or every rank's record at exit
(run-trainer's) is the evidence a pass needs. A stop from outside whose flight records put one rank behind names
that rank, even where gloo left no collective pending (it marks a timed-out one completed)."""
from __future__ import annotations

import json

from ddpdoctor.forensics.evidence import ending
from ddpdoctor.forensics.evidence.model import Frame, JobEvidence
from ddpdoctor.forensics.judge.dumps import Judged
from ddpdoctor.forensics.judge.verdict import Category, Culprit
from ddpdoctor.forensics.judge.verdict import Findings as Verdict
from ddpdoctor.forensics.judge.verdict import Verdict as JudgeVerdict
from ddpdoctor.forensics.judge.stopped import not_verified, stopped_from_outside
from tests.unit.helpers import run_cli

SUCCEEDED = ("I1128 22:00:59.155000 9674 torch/distributed/elastic/agent/server/api.py:932] [default] worker group "
             "successfully finished. Waiting 300 seconds for other agents to finish.\n"
             "I1128 22:00:59.155000 9674 torch/distributed/elastic/agent/server/api.py:985] Local worker group "
             "finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish\n")
SIGTERMED = ("W1128 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death signal, "
             "shutting down workers\n"
             "torch.distributed.elastic.multiprocessing.api.SignalException: Process 16082 got signal: 15\n")


def test_torchrun_s_own_success_line_is_the_evidence_of_a_normal_end():
    assert ending.agent_succeeded(SUCCEEDED)
    assert not ending.agent_succeeded("")  # torchrun at its default log level says nothing when all went well
    assert not ending.agent_succeeded("W1128 ... Setting OMP_NUM_THREADS environment variable ...\n")
    assert not ending.agent_succeeded(SUCCEEDED + SIGTERMED)  # a later stop: the success was an earlier attempt's
    assert ending.agent_succeeded("I... Restarting worker group\n" + SUCCEEDED)  # the restart came before


def test_every_rank_s_record_at_exit_with_exit_code_0_is_the_evidence_too(tmp_path):
    for r in (0, 1):
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"entries": [], "ended": {"exit_code": 0, "where": None}}))
    assert ending.ranks_ended_normally(tmp_path, [0, 1])
    assert not ending.ranks_ended_normally(tmp_path, [0, 1, 2])  # rank 2 left no record
    assert not ending.ranks_ended_normally(tmp_path, [])
    (tmp_path / "rank1.json").write_text(json.dumps({"entries": []}))  # written by a SIGTERM: no "ended"
    assert not ending.ranks_ended_normally(tmp_path, [0, 1])
    (tmp_path / "rank1.json").write_text(json.dumps({"ended": {"exit_code": 3}}))
    assert not ending.ranks_ended_normally(tmp_path, [0, 1])


def test_no_failure_and_no_normal_end_is_not_verified_never_a_pass():
    v = Verdict(root_cause=None)
    assert not_verified(v, normal_end=False, ranks=[0, 1])
    rc = v.root_cause
    assert rc.category == "unverified" and rc.rank is None and "not verified" in rc.message
    assert "2 rank(s)" in rc.message and "--agent-log" in rc.fix and "LOGLEVEL=INFO" in rc.fix
    v = Verdict(root_cause=None)
    assert not not_verified(v, normal_end=True, ranks=[0, 1]) and v.root_cause is None


def _dumps_verdict(rank: int) -> Judged:
    """The judge's typed verdict on dumps that put ``rank`` behind: missing from a collective, at its line."""
    found = JudgeVerdict(Category.MISSING_RANK, [Culprit(rank, True, where=Frame("/job/train.py", 40, "train"))])
    return Judged(found, JobEvidence(live=False, world=(0, rank)), "flight-recorder dumps", {})


def test_a_stop_from_outside_names_the_rank_the_records_put_behind_without_a_pending_time():
    """gloo's record marks the stuck all_reduce completed after its timeout: no collective pending 10 s, but
    the sequence ids (11 against 10) say who is behind. The stop names that rank, as likely."""
    v = Verdict(root_cause=None)
    stopped_from_outside(v, _dumps_verdict(1), stalled=None, signal="SIGTERM")
    rc = v.root_cause
    assert rc.rank == 1 and rc.error_type == "stopped_while_hung" and rc.location == "/job/train.py:40"
    assert "likely rank(s) 1" in rc.message and "SIGTERM" in rc.message
    v = Verdict(root_cause=None)  # no signal recorded and nothing pending: the records alone are no stop
    stopped_from_outside(v, _dumps_verdict(1), stalled=None, signal=None)
    assert v.root_cause is None


def _log_dir(tmp_path):
    attempt = tmp_path / "logs" / "job_a1b2c3d4" / "attempt_0"
    for r in (0, 1):
        (attempt / str(r)).mkdir(parents=True)
        (attempt / str(r) / "stdout.log").write_text("step 41 loss 2.31\n")  # ends mid-run, or at the end
        (attempt / str(r) / "stderr.log").write_text("")
    return tmp_path / "logs"


def test_postmortem_of_logs_that_end_without_a_word_is_exit_5_not_pass(tmp_path):
    env = {"DDPDOCTOR_NO_SAVE": "1"}
    p = run_cli("postmortem", str(_log_dir(tmp_path)), "--json", env=env)
    doc = json.loads(p.stdout)
    assert p.returncode == 5 and doc["verdict"] == "warn" and doc["exit_code"] == 5, p.stdout[-2000:]
    assert doc["root_cause"]["category"] == "unverified" and doc["culprit_ranks"] == []
    shown = run_cli("postmortem", str(tmp_path / "logs"), env=env)
    assert shown.returncode == 5 and "NOT VERIFIED" in shown.stdout and "PASS" not in shown.stdout
    assert "no failed rank" not in shown.stdout


def test_postmortem_passes_on_torchrun_s_success_line(tmp_path):
    logs = _log_dir(tmp_path)
    agent = tmp_path / "torchrun.stderr"
    agent.write_text(SUCCEEDED)
    p = run_cli("postmortem", str(logs), "--agent-log", str(agent), "--json", env={"DDPDOCTOR_NO_SAVE": "1"})
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["verdict"] == "pass" and doc["root_cause"] is None, p.stdout[-2000:]


def test_postmortem_of_a_scheduler_s_stop_says_the_stop(tmp_path):
    """scancel / a time limit: SIGTERM to torchrun (and every rank). With torchrun's output, the stop is said."""
    logs = _log_dir(tmp_path)
    agent = tmp_path / "torchrun.stderr"
    agent.write_text(SIGTERMED)
    p = run_cli("postmortem", str(logs), "--agent-log", str(agent), "--json", env={"DDPDOCTOR_NO_SAVE": "1"})
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["verdict"] == "fail", p.stdout[-2000:]
    assert doc["root_cause"]["error_type"] == "stopped_from_outside" and "SIGTERM" in doc["root_cause"]["message"]


def test_postmortem_of_a_run_trainer_run_passes_on_every_rank_s_record_at_exit(tmp_path):
    run = tmp_path / "run"
    logs = run / "logs" / "node-10.0.0.1-77"
    attempt = logs / "rid_a1b2c3d4" / "attempt_0"
    for r in (0, 1):
        (attempt / str(r)).mkdir(parents=True)
        (attempt / str(r) / "stderr.log").write_text("")
    (run / "flight_recorder").mkdir()
    for r in (0, 1):
        (run / "flight_recorder" / f"rank{r}.json").write_text(json.dumps({"entries": [], "ended": {"exit_code": 0}}))
    env = {"DDPDOCTOR_NO_SAVE": "1"}
    p = run_cli("postmortem", str(logs), "--json", env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["verdict"] == "pass", p.stdout[-2000:]
    (run / "flight_recorder" / "rank1.json").unlink()  # one rank's end unknown: not verified
    p = run_cli("postmortem", str(logs), "--json", env=env)
    assert p.returncode == 5, p.stdout[-2000:]


def test_a_stop_says_which_process_group_timeout_the_job_kept():
    """Issue 45 item 6: a library that keeps its own 30-minute timeout (HF Trainer on the CPU, DeepSpeed's group)
    hangs until the scheduler stops it; the stop says the timeout the records show, and that only the stop could
    end the wait."""
    from pathlib import Path

    from ddpdoctor.forensics.evidence.fr_dumps import pg_timeouts_s

    dumps = {r: (Path(f"rank{r}.json"), {"entries": [{"timeout_ms": 1800000}, {"timeout_ms": 600000}]})
             for r in (0, 1)}
    assert pg_timeouts_s(dumps) == [1800.0, 600.0]
    v = Verdict(root_cause=None)
    stopped_from_outside(v, _dumps_verdict(1), stalled=45.0, signal="SIGTERM", timeouts=[1800.0])
    assert v.root_cause.rank == 1 and "1800 s" in v.root_cause.message and "only the stop" in v.root_cause.message
    v = Verdict(root_cause=None)
    stopped_from_outside(v, None, stalled=None, signal="SIGTERM", timeouts=[1800.0])  # no sign of a hang: no word
    assert "1800" not in v.root_cause.message


def test_a_plain_log_dirs_parent_folder_is_no_run_of_its_own(tmp_path):
    """torchrun's `--log-dir jobs/2/logs`: `jobs/` is no run-trainer run, and the records at exit another job left
    in `jobs/flight_recorder/` say nothing of this one: not verified, never a pass on them."""
    jobs = tmp_path / "jobs"
    logs = _log_dir(jobs / "2")
    (jobs / "flight_recorder").mkdir()
    for r in (0, 1):
        (jobs / "flight_recorder" / f"rank{r}.json").write_text(json.dumps({"entries": [], "ended": {"exit_code": 0}}))
    p = run_cli("postmortem", str(logs), "--json", env={"DDPDOCTOR_NO_SAVE": "1"})
    assert p.returncode == 5 and json.loads(p.stdout)["verdict"] == "warn", p.stdout[-2000:]
