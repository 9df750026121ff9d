"""`ddpdoctor postmortem` on a path that is no torchrun log dir: one line and exit 2 (in-process; moved from the
integration tests, where each case cost an interpreter's start-up)."""
from __future__ import annotations

from tests.unit.helpers import run_cli


def test_unreadable_or_wrong_dir_is_one_line_exit_2(tmp_path):
    for args, needle in (([str(tmp_path / "nope")], "not a directory"), ([str(tmp_path)], "no torchrun log dir"),
                         ([str(tmp_path), "--agent-log", str(tmp_path / "x")], "")):
        p = run_cli("postmortem", *args)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr


def test_a_missing_fr_dir_is_one_line_exit_2(tmp_path):
    """A mistyped --fr-dir used to be ignored: the verdict then lacked the dumps the user pointed at."""
    logs = tmp_path / "logs"
    (logs / "job_abc" / "attempt_0" / "0").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    for target, needle in ((tmp_path / "nope", f"--fr-dir {tmp_path / 'nope'}: no such directory"),
                           (tmp_path / "file", "'--fr-dir'")):
        p = run_cli("postmortem", str(logs), "--fr-dir", str(target))
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert run_cli("postmortem", str(logs), "--fr-dir", str(tmp_path)).returncode in (0, 1, 5)


def test_postmortem_keeps_its_result_under_the_jobs_torchrun_id_and_says_where(tmp_path):
    """Issue 41 item 2: every command keeps its result, postmortem too (README, --help and `report` said so;
    it saved nothing). Its run id: the job's own torchrun id, read from the log dir's `<rdzv id>_<8 chars>`."""
    import json

    attempt = tmp_path / "logs" / "myjob7_a1b2c3d4" / "attempt_0"
    for r in (0, 1):
        (attempt / str(r)).mkdir(parents=True)
    (attempt / "1" / "error.json").write_text(json.dumps({"message": {
        "message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File "
                                                          "\"/job/train.py\", line 9, in step\nValueError: bad batch",
                                                          "timestamp": "1795390055"}}}))
    (attempt / "1" / "stderr.log").write_text("ValueError: bad batch\n")
    env = {"DDPDOCTOR_NO_SAVE": None, "DDPDOCTOR_RUN_ID": None, "SLURM_JOB_ID": None, "PBS_JOBID": None,
           "TORCHELASTIC_RUN_ID": None}
    p = run_cli("postmortem", str(tmp_path / "logs"), "--results-dir", str(tmp_path / "results"), env=env)
    assert p.returncode == 1, p.stderr
    saved = tmp_path / "results" / "myjob7" / "postmortem.json"
    doc = json.loads(saved.read_text())
    assert doc["run_id"] == "myjob7" and doc["verdict"] == "fail" and doc["config"]["source"] == "postmortem"
    assert "ValueError: bad batch" in json.dumps(doc["root_cause"])
    assert f"wrote result: {saved}" in p.stderr
    p = run_cli("postmortem", str(tmp_path / "logs"), "--results-dir", str(tmp_path / "results"), "--run-id", "wf-2",
                env=env)
    assert json.loads((tmp_path / "results" / "wf-2" / "postmortem.json").read_text())["run_id"] == "wf-2"
    p = run_cli("postmortem", str(tmp_path / "logs"), "--results-dir", str(tmp_path / "none"), "--no-save", env=env)
    assert p.returncode == 1 and not (tmp_path / "none").exists()


def _dump(enqueued: int, completed: int, seqs: list[int]) -> str:
    """A gloo flight record as torch 2.13's writer lays it out (FlightRecorderDetail.hpp's dump_json: version,
    pg_status, entries with collective_seq_id, profiling_name, frames)."""
    import json

    entries = [{"pg_id": 0, "collective_seq_id": s, "profiling_name": "gloo:allreduce", "input_sizes": [[16]],
                "input_dtypes": ["Float"], "is_p2p": False, "state": "completed",
                "frames": [{"filename": "train.py", "line": 40, "name": "step"}]} for s in seqs]
    return json.dumps({"version": "2.10", "pg_status": {"0": {"last_enqueued_collective": enqueued,
                                                              "last_completed_collective": completed}},
                       "entries": entries})


def test_fr_dir_alone_gives_the_dumps_verdict(tmp_path):
    """Issue 54 item 4: `postmortem --fr-dir DIR` with no torchrun log dir (dumps copied off a cluster): the rank
    the dumps name fails the job; before, DIR was required (exit 2, "Missing argument")."""
    import json

    (tmp_path / "rank0.json").write_text(_dump(10, 9, [9, 10]))
    (tmp_path / "rank1.json").write_text(_dump(9, 9, [9]))
    p = run_cli("postmortem", "--fr-dir", str(tmp_path), "--json", "--no-save")
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["culprit_ranks"] == [1] and doc["root_cause"]["rank"] == 1, (p.stderr, doc)
    assert doc["outcome"]["culprits"][0]["rank"] == 1 and doc["config"]["log_dir"] is None
    human = run_cli("postmortem", "--fr-dir", str(tmp_path), "--no-save")
    assert human.returncode == 1 and "rank 1" in human.stdout and not human.stderr.strip(), human.stderr


def test_fr_dir_alone_without_a_named_rank_is_not_verified_and_without_dumps_a_usage_error(tmp_path):
    import json

    (tmp_path / "d").mkdir()
    for r in (0, 1):
        (tmp_path / "d" / f"rank{r}.json").write_text(_dump(9, 9, [9]))
    p = run_cli("postmortem", "--fr-dir", str(tmp_path / "d"), "--json", "--no-save")
    doc = json.loads(p.stdout)
    assert p.returncode == 5 and doc["verdict"] == "warn" and doc["root_cause"]["error_type"] == "not_verified", doc
    assert "not verified" in doc["root_cause"]["message"] and doc["culprit_ranks"] == []
    (tmp_path / "empty").mkdir()
    for args, needle in ((["--fr-dir", str(tmp_path / "empty")], "no flight-recorder dump found"),
                         ([], "give the job's torchrun log dir")):
        q = run_cli("postmortem", *args, "--no-save")
        lines = [ln for ln in q.stderr.splitlines() if ln.strip()]
        assert q.returncode == 2 and len(lines) == 1 and needle in lines[0], q.stderr
