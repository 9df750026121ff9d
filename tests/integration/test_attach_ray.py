"""`ddpdoctor attach` on a Ray Train job (issue 45 item 5): `python ray_job.py FAULT` (library_jobs/ray_job.py: a
TorchTrainer over 2 CPU workers, prepare_model's DDP on gloo), started as users start it. Ray starts its workers
itself and sets their rank variables in-process, so before: "no torch.distributed job runs on this machine" (exit
2), hung or healthy. Now rank 1, asleep in its own code before its backward, is named at its line, and a healthy
job progresses (exit 0). Ray keeps its session in a short folder of the test's own (RAY_TMPDIR: Ray's socket paths
must stay under 108 characters); every process the job started is ended by its id at the end."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_attach import kill_family
from tests.integration.test_attach_libraries import LIBRARY_JOBS, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("ray") is None or importlib.util.find_spec("pyarrow") is None,
    reason="ray[train] is not installed (pip install 'ray[train]'): no Ray Train job to attach to")]
JOB = LIBRARY_JOBS / "ray_job.py"
HANG_LINE = next(i for i, line in enumerate((LIBRARY_JOBS / "faults.py").read_text().splitlines(), 1)
                 if "# FAULT hang:" in line)


class RayJob:
    """`python ray_job.py FAULT ARGS` in a session of its own; ``end`` ends it and every process it started."""

    def __init__(self, tmp_path: Path, fault: str, *args: str):
        self.session = Path(tempfile.mkdtemp(prefix="ddr-"))  # Ray's session folder: short paths for its sockets
        self.stall, self.log = tmp_path / "stall", tmp_path / "job.log"
        env = dict(os.environ, RAY_TMPDIR=str(self.session), RESULTS_DIR=str(tmp_path / "results"),
                   STALL_FILE=str(self.stall), FAULT_RANK="1", OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
        self.proc = subprocess.Popen([sys.executable, str(JOB), fault, *args], env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))

    def ranks_found(self, timeout: float = 120) -> None:
        """Until attach's discovery finds both workers (a healthy job has no fault to wait for)."""
        from ddpdoctor.forensics.attach import discover

        deadline = time.monotonic() + timeout
        while True:
            jobs = discover.discover({self.proc.pid}).jobs
            if jobs and sorted(r.rank for r in jobs[0].ranks) == [0, 1]:
                return
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, "Ray Train's workers were never found"
            time.sleep(0.5)

    def attach(self) -> tuple[subprocess.CompletedProcess, dict, float]:
        started = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--pid", str(self.proc.pid), "--json",
                              "--no-save", "--interval", "2", "--wait", "10"], capture_output=True, text=True,
                             timeout=120)
        return res, json.loads(res.stdout or "{}"), time.monotonic() - started

    def end(self) -> None:
        """SIGTERM to the driver first (Ray shuts its session down), then every process still under it, then any
        of Ray's that left the tree (re-parented to init): those whose command line names this job's session."""
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        kill_family(self.proc)
        left = []
        for p in psutil.process_iter():
            try:
                if str(self.session) in " ".join(p.cmdline()):
                    p.kill()
                    left.append(p)
            except psutil.Error:
                continue
        psutil.wait_procs(left, timeout=10)
        shutil.rmtree(self.session, ignore_errors=True)


@pytest.mark.timeout(240)
def test_a_ray_train_job_progresses_and_when_rank_1_hangs_it_is_named_at_its_line(tmp_path):
    """One Ray start-up (about 25 s on 2 cores) serves both: the job trains healthily until the test's file
    appears, then rank 1 sleeps in its own code (faults.py's `# FAULT hang:` line) while rank 0 waits in DDP."""
    go = tmp_path / "go"
    job = RayJob(tmp_path, "healthy", "--steps", "10000000", "--hang-when", str(go))
    try:
        job.ranks_found()
        time.sleep(1.0)  # both into their training loop
        healthy, healthy_doc, healthy_took = job.attach()
        go.touch()
        wait_for([job.stall], job.proc, job.log, timeout=60)
        time.sleep(1.0)  # rank 0 into its backward
        res, doc, took = job.attach()
    finally:
        job.end()
    # healthy: the job progresses, exit 0, no rank named
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    diag = healthy_doc["diagnosis"]
    assert diag["category"] == "progressing" and healthy_doc["verdict"] == "pass" and not diag.get("named"), diag
    assert healthy_doc["job"]["ranks_here"] == [0, 1] and healthy_took < 20
    # hung: rank 1 named at its line, rank 0's wait read from its training thread
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr == ""  # --json: no progress lines
    assert (doc["job"]["launcher"], doc["job"]["world_size"], doc["job"]["ranks_here"]) == ("ray", 2, [0, 1])
    assert doc["job"]["id"].startswith("ray:ray_train_run-") and doc["job"]["id"] == healthy_doc["job"]["id"]
    diag = doc["diagnosis"]
    assert diag["category"] == "missing_rank" and diag["named"] == [1], diag
    assert diag["culprits"][0]["where"] == f"{LIBRARY_JOBS / 'faults.py'}:{HANG_LINE}", diag["culprits"]
    rank0 = doc["ranks"][0]
    assert rank0["wait"]["library"] == "DDP" and rank0["where"].startswith(str(JOB)), rank0
    assert doc["notes"] == [] and took < 20, (doc["notes"], took)
