"""Issue 55 U5 with a real torchrun job at its default log level (no LOGLEVEL): a healthy job leaves nothing that shows
a normal end (torchrun prints no "SUCCEEDED" line, the ranks' logs are empty), so postmortem of its log dir and
output is "not verified" (exit 5) and its fix says what would tell; given SLURM's record of the job (a stand-in
`sacct` on PATH printing what sacct prints for a COMPLETED job with exit code 0:0: this machine keeps no SLURM
accounting), the same postmortem says pass, naming that record. One torchrun job of two ranks (~10 s), three
postmortems (~3 s each)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.integration.test_trainer import run_bounded
from tests.unit.forensics.evidence.test_scheduler_end import stand_in

HEALTHY = textwrap.dedent('''\
    import torch, torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    dist.destroy_process_group()
''')


def postmortem(*args: str, env: dict) -> tuple[int, dict]:
    p = run_bounded([sys.executable, "-m", "ddpdoctor", "postmortem", "--json", "--no-save", *args], 60, env=env)
    assert p.stdout.startswith("{"), p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout)


@pytest.mark.timeout(200)
def test_a_healthy_job_at_the_default_log_level_passes_only_on_the_schedulers_record_of_its_end(tmp_path):
    script = tmp_path / "healthy.py"
    script.write_text(HEALTHY)
    logs = tmp_path / "logs"
    env = {k: v for k, v in os.environ.items() if k != "LOGLEVEL" and not k.startswith(("SLURM_", "DDPDOCTOR_"))}
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--redirects", "3", "--log-dir", str(logs), "--monitor-interval", "0.5", str(script)],
                          capture_output=True, text=True, timeout=150, env=env, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SUCCEEDED" not in proc.stderr and "successfully finished" not in proc.stderr, proc.stderr  # default level
    agent = tmp_path / "torchrun.stderr"
    agent.write_text(proc.stderr)
    clean = {**env, "PATH": f"{tmp_path / 'none'}:/nonexistent"}  # no SLURM command: nothing shows the end
    for args in ((str(logs),), (str(logs), "--agent-log", str(agent))):
        code, doc = postmortem(*args, env=clean)
        rc = doc["root_cause"]
        assert code == 5 and doc["verdict"] == "warn" and rc["category"] == "unverified", (args, rc)
        assert "--run-id JOB" in rc["fix"] and "default log levels" in rc["fix"], rc["fix"]
    # what sacct prints for the job (SLURM_TIME_FORMAT=standard, local time), the job's user the log dir's owner
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    begin, end = (dt.datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S") for t in (started - 2, time.time()))
    stand_in(bin_dir, "sacct", f"4242|COMPLETED|0:0|{begin}|{end}|{os.stat(logs).st_uid}")
    slurm = {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}"}
    code, doc = postmortem(str(logs), "--agent-log", str(agent), "--run-id", "4242", env=slurm)  # as the fix says
    assert code == 0 and doc["verdict"] == "pass" and doc["root_cause"] is None, doc["root_cause"]
    assert doc["normal_end"] == "SLURM's record of job 4242 (sacct): COMPLETED, exit code 0:0", doc["normal_end"]
    assert doc["outcome"]["state"] == "pass" and doc["outcome"]["category"] == "normal_end", doc["outcome"]
    stand_in(bin_dir, "sacct", f"4242|TIMEOUT|0:15|{begin}|{end}|{os.stat(logs).st_uid}")
    code, doc = postmortem(str(logs), "--run-id", "4242", env=slurm)  # the scheduler's own word of another end: never a pass
    assert code == 5 and any("TIMEOUT" in n for n in doc["input_notes"]), doc["input_notes"]
