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
