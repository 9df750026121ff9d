"""Issue 55 U1: after a hang and `scancel`, postmortem named no rank (exit 5 from the log dir, "no culprit rank named"
with --agent-log) although `attach` had named rank 5 on node3 at train.py:34 and saved that verdict in the job's
ddpdoctor-results/<job>/ folder. That verdict is evidence for the postmortem, said as attach's; only a document of
this job (its run id, its rendezvous id, taken after its last attempt started) and one the reader may trust."""
from __future__ import annotations

import json
import os
import pwd
import time

import pytest

from ddpdoctor import documents
from ddpdoctor.forensics.postmortem.engine import explain

JOB = "4242"
SIGTERM_LINE = ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 15\n")


@pytest.fixture(autouse=True)
def no_run_id_from_the_environment(monkeypatch):
    for var in documents.RUN_ID_VARS:  # the run id is the log dir's own rendezvous id, as after the job
        monkeypatch.delenv(var, raising=False)


def hung_job(tmp_path, ranks: int = 8):
    """A log dir as `scancel` leaves a hung job's (torchrun --rdzv-id 4242): every rank's log silent, no error file."""
    attempt = tmp_path / "logs" / f"{JOB}_abcdefgh" / "attempt_0"
    for local in range(ranks):
        (attempt / str(local)).mkdir(parents=True)
        (attempt / str(local) / "stderr.log").write_text("")
    started = time.time() - 600
    for d in (attempt, attempt.parent):
        os.utime(d, (started, started))
    return tmp_path / "logs"


def attach_doc(run_id: str = JOB, job_id: str = f"{JOB}@node1:29500", created: str | None = None) -> dict:
    return {"schema": "ddpdoctor", "schema_version": 1, "kind": "attach", "run_id": run_id,
            "created": created or documents.now_iso(), "verdict": "fail", "exit_code": 1, "role": "master",
            "job": {"id": job_id, "world_size": 8},
            "diagnosis": {"category": "missing_rank", "summary": "rank(s) 5 never entered all_reduce that rank(s) "
                          "0-4, 6, 7 wait in", "fix": "look at rank 5's stack at train.py:34",
                          "culprits": [{"rank": 5, "host": "node3", "node": "node3", "where": "train.py:34",
                                        "function": "step"}],
                          "named": [5], "likely_culprits": [], "evidence": ["wait_for_graph"]}}


def saved(tmp_path, doc: dict, name: str = "attach.json"):
    folder = tmp_path / "ddpdoctor-results" / JOB
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(doc))
    os.chmod(path, 0o644)
    return path


def test_the_rank_attach_named_while_the_job_hung_is_the_postmortems_said_as_attachs(tmp_path):
    logs, results = hung_job(tmp_path), tmp_path / "ddpdoctor-results"
    agent = tmp_path / "torchrun.err"
    agent.write_text(SIGTERM_LINE)
    before = explain(logs, None, [], results=results)  # nothing saved: not verified, no rank
    assert before["exit_code"] == 5 and before["culprit_ranks"] == []
    path = saved(tmp_path, attach_doc())
    doc = explain(logs, None, [], results=results)
    rc = doc["root_cause"]
    assert doc["exit_code"] == 1 and doc["verdict"] == "fail" and doc["culprit_ranks"] == [5], rc
    assert (rc["rank"], rc["host"], rc["location"], rc["error_type"]) == (5, "node3", "train.py:34",
                                                                         "hung_when_attached"), rc
    assert "named by `ddpdoctor attach`" in rc["message"] and str(path) in rc["message"], rc["message"]
    assert doc["outcome"]["state"] == "hang" and [c["rank"] for c in doc["outcome"]["culprits"]] == [5]
    assert doc["outcome"]["culprits"][0]["where"] == "train.py:34" and "attach_saved_verdict" in doc["outcome"]["evidence"]
    assert doc["hang"]["source"] == str(path)
    # with torchrun's output: the stop from outside, and the rank attach named (was "no culprit rank named")
    stopped = explain(logs, agent, [], results=results)
    rc = stopped["root_cause"]
    assert stopped["exit_code"] == 1 and stopped["culprit_ranks"] == [5] and rc["signal"] == "SIGTERM", rc
    assert "stopped from outside (SIGTERM)" in rc["message"], rc["message"]


# each document made when its test runs, after the job's logs: made at collection, "created" is older than a log
# dir written minutes later under xdist (CI), and the note is "taken before", not the reason the case is about
@pytest.mark.parametrize("make, why", [
    (lambda: attach_doc(run_id="4241"), "run id '4241'"),
    (lambda: attach_doc(job_id="777@node1:29500"), "the job attach read (777@node1:29500)"),
    (lambda: attach_doc(created="2020-01-01T00:00:00+00:00"), "before this job's last attempt started"),
    (lambda: {**attach_doc(), "verdict": "pass", "diagnosis": {"category": "progressing"}}, "attach found no hang"),
])
def test_another_jobs_or_an_earlier_runs_verdict_is_no_evidence(tmp_path, make, why):
    logs = hung_job(tmp_path)
    path = saved(tmp_path, make())
    out = explain(logs, None, [], results=tmp_path / "ddpdoctor-results")
    assert out["exit_code"] == 5 and out["culprit_ranks"] == [], out["root_cause"]
    assert any(str(path) in n and why in n for n in out["input_notes"]), out["input_notes"]


def test_a_verdict_another_user_could_have_written_is_no_evidence(tmp_path):
    """As root (the machine's tests run as root): a document `nobody` owns, or one others may write, is not
    evidence; the note says why."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to nobody")
    nobody = pwd.getpwnam("nobody").pw_uid
    logs = hung_job(tmp_path)
    path = saved(tmp_path, attach_doc())
    os.chown(path, nobody, -1)
    out = explain(logs, None, [], results=tmp_path / "ddpdoctor-results")
    assert out["exit_code"] == 5 and out["culprit_ranks"] == [], out["root_cause"]
    assert any(str(path) in n and "nobody" in n for n in out["input_notes"]), out["input_notes"]
    os.chown(path, 0, -1)
    os.chmod(path, 0o666)
    out = explain(logs, None, [], results=tmp_path / "ddpdoctor-results")
    assert out["exit_code"] == 5 and any("writable by others" in n for n in out["input_notes"]), out["input_notes"]
    os.chmod(path, 0o644)  # root's, written by no one else: evidence
    assert explain(logs, None, [], results=tmp_path / "ddpdoctor-results")["culprit_ranks"] == [5]


def test_as_a_user_another_users_verdict_in_a_shared_results_folder_is_no_evidence(tmp_path, monkeypatch):
    """Not root: the user's own (or root's) document only, never one another user owns in a shared folder."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to nobody")
    from ddpdoctor import trust

    monkeypatch.setattr(trust, "as_root", lambda: False)  # the user's rules: no walk from /, the file itself
    logs = hung_job(tmp_path)
    path = saved(tmp_path, attach_doc())
    assert explain(logs, None, [], results=tmp_path / "ddpdoctor-results")["culprit_ranks"] == [5]
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    out = explain(logs, None, [], results=tmp_path / "ddpdoctor-results")
    assert out["culprit_ranks"] == [] and any("owned by nobody" in n for n in out["input_notes"]), out["input_notes"]


def test_the_flight_records_in_the_jobs_own_folder_are_its_dumps_too(tmp_path):
    """`ddpdoctor postmortem <run>/logs/<node>` of a run-trainer run stopped by scancel: run-trainer keeps the ranks'
    NCCL dumps (nccl_trace_rank_<R>) in the run's folder, beside logs/, which the log dir's search never reached:
    no rank named. They are this job's (the folder of its run id): rank 1, behind by its sequence ids, is named; a
    folder named otherwise (any folder two levels up a plain torchrun log dir) is not searched."""
    from tests.unit.forensics.evidence.test_fr_dumps import entry, record

    def run_folder(name: str):
        run = tmp_path / name
        attempt = run / "logs" / "node0" / "R1_abcdefgh" / "attempt_0"
        for local in (0, 1):
            (attempt / str(local)).mkdir(parents=True)
            (attempt / str(local) / "stderr.log").write_text("")
        (run / "nccl_trace_rank_0").write_text(json.dumps(record(10, 9, [entry(9), entry(10)])))
        (run / "nccl_trace_rank_1").write_text(json.dumps(record(9, 9, [entry(9)])))
        return run / "logs" / "node0"

    agent = tmp_path / "torchrun.err"
    agent.write_text(SIGTERM_LINE)
    other = explain(run_folder("other"), agent, [], results=tmp_path / "ddpdoctor-results")
    assert other["culprit_ranks"] == [] and other["exit_code"] == 1, other["root_cause"]  # the stop, no rank
    doc = explain(run_folder("R1"), agent, [], results=tmp_path / "elsewhere")  # the run-trainer run's folder
    assert doc["culprit_ranks"] == [1] and doc["root_cause"]["signal"] == "SIGTERM", doc["root_cause"]
