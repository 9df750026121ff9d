"""How the scheduler says a job ended: SLURM's record of the job (its state and exit code), the evidence of a normal
end that torchrun and srun do not write at their default log levels.

torchrun at its default level (WARNING) prints nothing when its workers succeed (its "WorkerState.SUCCEEDED" line
is INFO), and srun prints nothing for a task that exits 0 (only "srun: error: node2: task 1: Exited with exit code
1", "Killed", or slurmstepd's "CANCELLED AT ..."). What does say it is SLURM's own record: `sacct` (where
accounting is kept) or `scontrol show job` (for MinJobAge after the end, 300 s by default): `COMPLETED` with
exit code `0:0` (while the job still runs, its step that ran torchrun: `J.0`). It is read only where the run id is a SLURM job id, and taken for this job only where the job's
user owns the log dir and the job ran when the log dir's last attempt started. Each command is bounded; a missing
one, a refused one (as root: a program another user could change) or no record is no evidence, said as such."""
from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from ... import trust

TIMEOUT_S = 10.0  # each command: a controller that does not answer is no evidence, never a wait
START_SLACK_S = 120.0  # the job starts, then srun, then torchrun's rendezvous: the attempt folder comes later
JOB_ID = re.compile(r"\d{1,12}(?:_\d{1,9})?")  # a SLURM job id, or an array task's 123_4
FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")


@dataclass
class JobEnd:
    """SLURM's word on how job ``job`` ended: its state, its exit code, and which command said it."""
    job: str
    state: str
    exit_code: str
    source: str

    @property
    def normal(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == "0:0"

    def said(self) -> str:
        return f"SLURM's record of job {self.job} ({self.source}): {self.state}, exit code {self.exit_code}"


def job_end(run_id: str, started: float | None, owner: int | None, notes: list[str]) -> JobEnd | None:
    """SLURM's record of the job ``run_id`` when it is of this job (run by ``owner``, the log dir's owner, and
    running at ``started``, its last attempt's start); None otherwise, with a note when a record was not used."""
    if not JOB_ID.fullmatch(run_id or "") or started is None:
        return None
    for read in (_sacct, _scontrol):
        record = read(run_id, started)
        if record is None:
            continue
        why = _not_this_job(record, started, owner)
        if why:
            notes.append(f"SLURM's record of job {run_id}: not used as evidence ({why})")
            return None
        return JobEnd(run_id, record["state"], record["exit_code"], record["source"])
    return None


def _not_this_job(record: dict, started: float, owner: int | None) -> str | None:
    if owner is not None and record.get("uid") is not None and record["uid"] != owner:
        return f"its user is uid {record['uid']}, the log dir's uid {owner}"
    begin, end = _when(record.get("start")), _when(record.get("end"))
    if begin is None or begin > started + START_SLACK_S or (end is not None and end < started):
        return f"it ran {record.get('start')} to {record.get('end')}, not when this log dir's last attempt started"
    return None


def _when(text) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(text)).timestamp()  # SLURM prints local time, as fromisoformat reads it
    except ValueError:
        return None


def _sacct(job: str, started: float) -> dict | None:
    """The record of the job's step that ran the log dir's last attempt (`J.0` COMPLETED 0:0), whether the job
    still runs (a batch script's postmortem after its `srun torchrun` step) or has ended; else the job's own."""
    out = _run("sacct", "-n", "-P", "-j", job, "-o", "JobIDRaw,State,ExitCode,Start,End,UID")
    records = {}
    for line in (out or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and (parts[0] == job or re.fullmatch(re.escape(job) + r"\.\d{1,9}", parts[0])):
            records[parts[0]] = {"state": parts[1].split()[0] if parts[1] else "", "exit_code": parts[2],
                                 "start": parts[3], "end": parts[4], "uid": int(parts[5]) if parts[5].isdigit() else None,
                                 "source": "sacct" if parts[0] == job else f"sacct, step {parts[0]}"}
    whole = records.pop(job, None)
    # The step that ran the log dir's last attempt says how torchrun ended, before the job's own record: that is
    # the batch script's (`srun torchrun ...; echo done` is COMPLETED 0:0 with a failed step 0).
    steps = [r for r in records.values() if _not_this_job(dict(r, uid=None), started, None) is None]
    if len(steps) == 1:
        return dict(steps[0], uid=(whole or {}).get("uid"))
    return whole


def _scontrol(job: str, started: float) -> dict | None:
    out = _run("scontrol", "-o", "show", "job", job)
    for line in (out or "").splitlines():
        fields = dict(FIELD.findall(line))
        if fields.get("JobId") != job or "JobState" not in fields:
            continue
        uid = re.search(r"\((\d+)\)$", fields.get("UserId", ""))
        return {"state": fields["JobState"], "exit_code": fields.get("ExitCode", ""), "start": fields.get("StartTime"),
                "end": fields.get("EndTime"), "uid": int(uid.group(1)) if uid else None, "source": "scontrol"}
    return None


def _run(program: str, *args: str) -> str | None:
    """A SLURM command's output; None when it is not here, refused (as root: a program another user could change),
    slow or failing."""
    path, _ = trust.program(program)
    if path is None:
        return None
    try:
        p = subprocess.run([path, *args], capture_output=True, text=True, timeout=TIMEOUT_S, errors="replace",
                           stdin=subprocess.DEVNULL, env={**os.environ, "SLURM_TIME_FORMAT": "standard"})
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None
