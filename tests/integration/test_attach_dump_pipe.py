"""attach reads the flight recorder through torch's own dump pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE) where a job set
it up. ProcessGroupNCCL needs a GPU, so the ranks here are stand-ins that do what its monitor thread does: make
the FIFO ``<stem><rank>.pipe``, poll it without blocking, and on a request write the pickled record to
``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`` (recorded NCCL fields: rank 1 never entered all_reduce #9). The
records, not the stacks (every stand-in sleeps in its own loop), must place rank 1 behind; the stand-ins keep
running, and a path that is no pipe is never written."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from ddpdoctor.forensics.attach import dump_pipe

pytestmark = pytest.mark.slow

STAND_IN = r'''
import os, pickle, sys, time
rank = int(os.environ["RANK"])
pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + f"{rank}.pipe"
out = os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + f"{rank}"
record = pickle.loads(bytes.fromhex(sys.argv[1]))
os.mkfifo(pipe)
fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)

def monitor_loop():
    while True:
        try:
            got = os.read(fd, 128)
        except BlockingIOError:
            got = b""
        if got:
            tmp = out + ".part"
            with open(tmp, "wb") as fh:
                fh.write(pickle.dumps(record))
            os.replace(tmp, out)
        time.sleep(0.2)

monitor_loop()
'''

LAUNCHER = r'''
import os, subprocess, sys, time
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1], arg],
                          env=dict(os.environ, RANK=str(r), WORLD_SIZE="3", LOCAL_RANK=str(r)))
         for r, arg in enumerate(sys.argv[2:])]
for p in procs:
    p.wait()
'''


def nccl_record(rank: int, last: int) -> dict:
    entries = [{"record_id": s, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": s,
                "p2p_seq_id": 0, "op_id": s, "profiling_name": "nccl:all_reduce", "time_created_ns": s,
                "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
                "output_dtypes": ["Float"], "state": "completed" if s < last else "started",
                "timeout_ms": 1800000, "is_p2p": False, "frames": []} for s in range(1, last + 1)]
    if rank == 1:  # behind: its last collective completed on the others' side too
        entries[-1]["state"] = "completed"
    return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
            "pg_status": {"0": {"last_enqueued_collective": last, "last_completed_collective": last - 1 if rank != 1
                                else last}}, "entries": entries}


@pytest.fixture
def stand_in_job(tmp_path):
    records = [nccl_record(0, 9), nccl_record(1, 8), nccl_record(2, 9)]
    env = dict(os.environ, TORCH_NCCL_DEBUG_INFO_PIPE_FILE=str(tmp_path / "pipe_"),
               TORCH_NCCL_TRACE_BUFFER_SIZE="2000", TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(tmp_path / "trace_"))
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, STAND_IN, *(pickle.dumps(r).hex() for r in records)],
                                env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"pipe_{r}.pipe").exists() for r in range(3)):
            assert launcher.poll() is None and time.monotonic() < deadline, "the stand-ins never made their pipes"
            time.sleep(0.1)
        yield launcher
    finally:
        family = psutil.Process(launcher.pid).children(recursive=True)
        for p in family:
            p.kill()
        launcher.kill()
        launcher.wait(10)
        psutil.wait_procs(family, timeout=10)


@pytest.mark.timeout(180)
def test_the_flight_record_comes_through_torchs_dump_pipe_and_places_the_late_rank(stand_in_job, tmp_path):
    res = subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--no-save", "--json", "--interval", "1",
                          "--pid", str(stand_in_job.pid)], capture_output=True, text=True, timeout=150)
    assert res.returncode == 1, res.stdout + res.stderr
    diag = json.loads(res.stdout)["diagnosis"]
    assert diag["named"] == [1] and "all_reduce" in diag["summary"], diag
    assert sorted(c["rank"] for c in diag["consequences"]) == [0, 2], diag
    assert all((tmp_path / f"trace_{r}").exists() for r in range(3))  # each rank was asked, and answered
    assert stand_in_job.poll() is None and len(psutil.Process(stand_in_job.pid).children()) == 3


def test_no_pipe_no_write(tmp_path):
    """A regular file, a link to one, or a pipe the rank does not hold: never written, no request made."""
    plain = tmp_path / "p0.pipe"
    plain.write_text("keep")
    link = tmp_path / "p1.pipe"
    link.symlink_to(plain)
    fifo = tmp_path / "p2.pipe"
    os.mkfifo(fifo)
    rank = SimpleNamespace(pid=os.getpid(), rank=0, uid=os.geteuid(), gid=os.getegid(),
                           dump_pipe=(str(plain), str(tmp_path / "never")))
    assert not dump_pipe.request(rank, str(plain)) and not dump_pipe.request(rank, str(link))
    assert not dump_pipe.request(rank, str(fifo))  # not held open by the rank (and nobody reads it)
    held = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert dump_pipe.request(rank, str(fifo)) and os.read(held, 8) == b"1"  # the rank's own pipe
    finally:
        os.close(held)
    assert plain.read_text() == "keep"
    assert dump_pipe.flight_record(rank, 0.5) is None


def test_the_paths_follow_torchs_variables():
    env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/fr_", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}
    assert dump_pipe.paths(env, 3) == ("/run/fr_3.pipe", "/tmp/nccl_trace_rank_3")
    assert dump_pipe.paths({**env, "TORCH_FR_DUMP_TEMP_FILE": "/d/t_"}, 3) == ("/run/fr_3.pipe", "/d/t_3")
    assert dump_pipe.paths({**env, "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, 3) is None  # no recorder: no dump
    assert dump_pipe.paths({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, 3) is None


def test_a_job_that_set_the_pipe_but_opened_none_is_said_not_silently_skipped(tmp_path):
    """Issue 54 item 7: torch 2.15's default "nccl" (ProcessGroupNCCL2) opens no debug-info pipe (the pipe is
    ProcessGroupNCCL.cpp's, legacy only), so a 2.15 job that set TORCH_NCCL_DEBUG_INFO_PIPE_FILE has none: attach
    says so, and why, instead of returning no record without a word. Cost: one forked child, about 0.1 s."""
    from ddpdoctor.forensics.attach import job_access

    job_access.take_notes()
    rank = SimpleNamespace(pid=os.getpid(), rank=3, uid=os.geteuid(), gid=os.getegid(),
                           dump_pipe=(str(tmp_path / "pipe_3.pipe"), str(tmp_path / "trace_3")))
    assert dump_pipe.flight_record(rank, 2.0) is None
    notes = job_access.take_notes()
    assert len(notes) == 1 and notes[0].startswith("rank 3: the job set TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), notes
    assert "ProcessGroupNCCL2" in notes[0] and str(tmp_path / "pipe_3.pipe") in notes[0]
