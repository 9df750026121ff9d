"""Issue 55 U5: a healthy job's postmortem was "not verified" (exit 5) unless torchrun ran at LOGLEVEL=INFO. At
their default levels torchrun and srun write nothing when a job ends normally (tests/integration/
test_postmortem_default_level.py runs one); SLURM's record of the job does say it: COMPLETED, exit code 0:0. It is
read (sacct, else scontrol show job) where the run id is a SLURM job id, and only for this job (its user, its time).
The commands here are stand-ins on PATH printing what SLURM prints (`SLURM_TIME_FORMAT=standard`)."""
from __future__ import annotations

import datetime as dt
import os
import stat
import time

import pytest

from ddpdoctor.forensics.evidence import scheduler_end


def stand_in(folder, name: str, output: str, code: int = 0) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {code}\n")
    path.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def local(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    return folder


def test_sacct_s_completed_with_exit_code_0_is_a_normal_end_of_this_job(bin_dir):
    started = time.time() - 300
    stand_in(bin_dir, "sacct", f"4242|COMPLETED|0:0|{local(started - 30)}|{local(started + 200)}|{os.getuid()}")
    end = scheduler_end.job_end("4242", started, os.getuid(), notes := [])
    assert end is not None and end.normal and end.source == "sacct" and notes == []
    assert end.said() == "SLURM's record of job 4242 (sacct): COMPLETED, exit code 0:0"
    stand_in(bin_dir, "sacct", f"4242|TIMEOUT|0:15|{local(started - 30)}|{local(started + 200)}|{os.getuid()}")
    assert not scheduler_end.job_end("4242", started, os.getuid(), []).normal
    assert scheduler_end.job_end("none", started, os.getuid(), []) is None  # not a job id: nothing asked


def test_inside_the_running_job_its_step_that_ran_torchrun_says_the_end(bin_dir):
    """A batch script's `srun torchrun ...; ddpdoctor postmortem logs`: the job runs, its step 0 COMPLETED 0:0."""
    started, uid = time.time() - 300, os.getuid()
    lines = [f"4242|RUNNING|0:0|{local(started - 60)}|Unknown|{uid}",
             f"4242.batch|RUNNING|0:0|{local(started - 60)}|Unknown|",
             f"4242.0|COMPLETED|0:0|{local(started - 5)}|{local(started + 200)}|"]
    stand_in(bin_dir, "sacct", "\n".join(lines))
    end = scheduler_end.job_end("4242", started, uid, [])
    assert end is not None and end.normal and end.source == "sacct, step 4242.0", end
    stand_in(bin_dir, "sacct", "\n".join(lines[:2] + [lines[2].replace("COMPLETED|0:0", "FAILED|1:0")]))
    assert not scheduler_end.job_end("4242", started, uid, []).normal
    stand_in(bin_dir, "sacct", "\n".join(lines[:2]))  # the step not ended yet (or no step record): the job runs
    assert scheduler_end.job_end("4242", started, uid, []).state == "RUNNING"


def test_a_batch_script_that_completed_after_its_torchrun_step_failed_is_no_normal_end(bin_dir):
    """`srun torchrun ...; echo done`: the job COMPLETED 0:0 (the script's last line), its step 0 FAILED (a rank
    SIGKILLed): the step that ran this log dir's attempt says how it ended, never the script's exit."""
    started, uid = time.time() - 300, os.getuid()
    stand_in(bin_dir, "sacct", "\n".join([f"4242|COMPLETED|0:0|{local(started - 60)}|{local(started + 250)}|{uid}",
                                          f"4242.batch|COMPLETED|0:0|{local(started - 60)}|{local(started + 250)}|",
                                          f"4242.0|FAILED|9:0|{local(started - 5)}|{local(started + 200)}|"]))
    end = scheduler_end.job_end("4242", started, uid, [])
    assert end is not None and not end.normal and end.source == "sacct, step 4242.0", end


def test_another_users_job_or_another_time_is_not_this_job(bin_dir):
    started = time.time() - 300
    stand_in(bin_dir, "sacct", f"4242|COMPLETED|0:0|{local(started - 30)}|{local(started + 200)}|65534")
    notes: list[str] = []
    assert scheduler_end.job_end("4242", started, 0, notes) is None and "uid 65534" in notes[0], notes
    stand_in(bin_dir, "sacct", f"4242|COMPLETED|0:0|{local(started - 9000)}|{local(started - 8000)}|0")
    notes = []
    assert scheduler_end.job_end("4242", started, 0, notes) is None and "not when" in notes[0], notes


def test_without_accounting_scontrol_s_record_is_read(bin_dir):
    """sacct fails where accounting_storage/none; slurmctld keeps the job's record MinJobAge after its end."""
    started = time.time() - 300
    stand_in(bin_dir, "sacct", "sacct: error: Slurm accounting storage is disabled", code=1)
    stand_in(bin_dir, "scontrol", f"JobId=4242 JobName=train UserId=root(0) GroupId=root(0) JobState=COMPLETED "
                                  f"Reason=None ExitCode=0:0 StartTime={local(started - 5)} EndTime={local(started + 60)}")
    end = scheduler_end.job_end("4242", started, 0, [])
    assert end is not None and end.normal and end.source == "scontrol"


def test_a_stand_in_another_user_could_change_is_not_run_as_root(bin_dir):
    if os.geteuid() != 0:
        pytest.skip("root's rule")
    started = time.time() - 300
    stand_in(bin_dir, "sacct", f"4242|COMPLETED|0:0|{local(started - 30)}|{local(started + 200)}|0")
    (bin_dir / "sacct").chmod(0o777)  # anyone may rewrite it: root never runs it
    assert scheduler_end.job_end("4242", started, 0, []) is None


def test_postmortem_asks_for_the_log_dirs_rendezvous_id_and_passes_on_its_record(bin_dir, tmp_path, monkeypatch):
    """`srun torchrun --rdzv-id $SLURM_JOB_ID`: the log dir's own id is the job's; no --run-id needed."""
    from ddpdoctor import documents
    from ddpdoctor.forensics.postmortem.engine import explain
    from tests.unit.forensics.postmortem.test_known import hung_job

    for var in documents.RUN_ID_VARS:
        monkeypatch.delenv(var, raising=False)
    logs = hung_job(tmp_path, ranks=2)  # logs/4242_abcdefgh/attempt_0/{0,1}, started 600 s ago, silent
    started = time.time() - 600
    stand_in(bin_dir, "sacct", f"4242|COMPLETED|0:0|{local(started - 30)}|{local(started + 500)}|{os.getuid()}")
    doc = explain(logs, None, [])
    assert doc["exit_code"] == 0 and doc["normal_end"].startswith("SLURM's record of job 4242"), doc["root_cause"]
