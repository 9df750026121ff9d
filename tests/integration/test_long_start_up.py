"""Issue 45 item 2: run-trainer stopped healthy jobs whose start-up after init_process_group outlasts the hang
threshold ("every rank is stuck in its own code", the job killed): a cold torch.compile (rank 0 compiling, rank 1
on the compile lock), an op build by a compiler child holding a lock the other rank waits on, a module whose
import takes seconds of CPU. Their ranks move (evidence.movement: a helper's CPU, start-up work, a stack moving in
a library), so the watchdog stops nothing; a real hang after such a start-up is still named. The cold torch.compile
job (long_start.py compile) is run by hand, not here: on torch 2.13 its compile phases never outlasted the threshold
between DDP's collectives, before the movement rule or after (45 s of the suite for no discrimination).
A rank downloading from a slow server while the other waits (the movement policy's I/O rule) is run under
run-trainer and read by attach."""
from __future__ import annotations

import http.server
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_trainer import run_trainer

pytestmark = pytest.mark.slow
JOB = Path(__file__).parent / "start_up_jobs" / "long_start.py"
HANG_TIMEOUT = "6"  # well under each start-up below


def run(tmp_path: Path, mode: str, seconds: float = 12, env: dict | None = None):  # twice the threshold: a stop
    work = tmp_path / "work"                                                           # would come mid-start-up
    work.mkdir()
    env = {"START_UP_DIR": str(work), "IMPORT_S": str(seconds), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "OMP_NUM_THREADS": "1", **(env or {})}
    return run_trainer("--nproc-per-node", "2", "--hang-timeout", HANG_TIMEOUT, "--", str(JOB), mode,
                       run_dir=tmp_path / "run", timeout=420, env=env)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["import", "build"])
def test_a_long_start_up_that_moves_is_no_hang(tmp_path, mode):
    if mode == "build" and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    p, doc = run(tmp_path, mode)
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    assert doc["hang"] is None and "[hang]" not in p.stderr, p.stderr[-3000:]


@pytest.mark.timeout(300)
def test_a_hang_after_a_long_start_up_is_still_named(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    p, doc = run(tmp_path, "build+hang", seconds=15)
    assert p.returncode == 1 and doc and doc["verdict"] == "fail", p.stderr[-4000:]
    assert doc["culprit_ranks"] == [1], (doc["culprit_ranks"], doc["root_cause"])
    assert doc["root_cause"]["location"].startswith(str(JOB)), doc["root_cause"]


@pytest.mark.timeout(300)
def test_every_rank_computing_in_its_own_code_is_no_hang(tmp_path):
    """Issue 53: a healthy job whose ranks compute in their own code after DDP's constructor, twice the threshold:
    no rank waits, so the job computes (judge.policy): never stopped, exit 0, no culprit."""
    p, doc = run(tmp_path, "compute", seconds=14)
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    assert doc["hang"] is None and doc["culprit_ranks"] == [] and "[hang]" not in p.stderr, p.stderr[-3000:]
    assert (doc["outcome"]["state"], doc["outcome"]["culprits"]) == ("pass", [])


@pytest.mark.timeout(300)
def test_ranks_waiting_on_a_busy_rank_are_said_live_and_not_stopped(tmp_path):
    """Issue 53: rank 0 computes in its own code while rank 1 waits in a barrier: waiting on busy rank 0, said live
    (who waits for whom, where rank 0 stands), the job not stopped; it trains to the end."""
    p, doc = run(tmp_path, "compute0", seconds=14)
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    said = [line for line in p.stderr.splitlines() if "wait for busy" in line]
    assert said and "rank(s) 1 wait for busy rank 0 at " + str(JOB) in said[0], p.stderr[-3000:]
    assert "in own_compute" in said[0] and "not a hang" in said[0], said


@pytest.mark.timeout(300)
def test_ranks_waiting_on_a_rank_whose_python_subprocess_computes_are_not_stopped(tmp_path):
    """Rank 0 runs an evaluation as a Python subprocess (14 s of CPU, over twice the threshold) while rank 1 waits
    in a barrier; rank 0 itself sits in subprocess.run. Before the rule (policy.children_worked): stopped at the
    threshold, "rank(s) 0 never entered barrier"."""
    p, doc = run(tmp_path, "subprocess0", seconds=14)
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    assert doc["hang"] is None and doc["culprit_ranks"] == [] and "[hang]" not in p.stderr, p.stderr[-3000:]
    said = [line for line in p.stderr.splitlines() if "wait for busy" in line]
    assert said and "rank(s) 1 wait for busy rank 0 at " + str(JOB) in said[0], p.stderr[-3000:]


@pytest.mark.timeout(300)
def test_ranks_waiting_on_a_rank_whose_data_loader_workers_compute_are_not_stopped(tmp_path):
    """One batch of rank 0's DataLoader costs 14 s of CPU in its worker while rank 1 waits in DDP's all_reduce: rank
    0's main process waits on its workers' queue (multiprocessing), the worker computes. Before the child-wait rule
    (2026-12-07, run by hand): stopped at the threshold, "rank(s) 0 never entered all_reduce"."""
    p, doc = run(tmp_path, "loader0", seconds=14)
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    assert doc["hang"] is None and doc["culprit_ranks"] == [] and "[hang]" not in p.stderr, p.stderr[-3000:]
    assert any("wait for busy rank 0" in line for line in p.stderr.splitlines()), p.stderr[-3000:]


class SlowFile(http.server.BaseHTTPRequestHandler):
    """A hub over a slow link: 20 KB every 0.1 s (200 KB/s) for SECONDS."""
    SECONDS = 14

    def do_GET(self):
        chunks = int(self.SECONDS / 0.1)
        self.send_response(200)
        self.send_header("Content-Length", str(chunks * 20_000))
        self.end_headers()
        try:
            for _ in range(chunks):
                self.wfile.write(b"w" * 20_000)
                self.wfile.flush()
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the job ended (or was ended) before the download did

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowFile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/model.bin"
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(300)
def test_ranks_waiting_on_a_rank_that_downloads_are_not_stopped(tmp_path, slow_hub):
    """Rank 0 downloads a file at 200 KB/s for 14 s (more than twice the threshold) while rank 1 waits in a
    barrier: its stack stands in one read and it uses almost no CPU; its bytes move (judge.policy's I/O rule).
    Before it: stopped at the threshold, "rank(s) 0 never entered barrier"."""
    p, doc = run(tmp_path, "download0", env={"DOWNLOAD_URL": slow_hub})
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    assert doc["hang"] is None and doc["culprit_ranks"] == [] and "[hang]" not in p.stderr, p.stderr[-3000:]
    assert (tmp_path / "work" / "model.bin").stat().st_size == 140 * 20_000
    said = [line for line in p.stderr.splitlines() if "wait for busy" in line]
    assert said and "rank(s) 1 wait for busy rank 0 at " + str(JOB) in said[0], p.stderr[-3000:]


@pytest.mark.timeout(300)
def test_ranks_waiting_on_a_rank_that_fetches_into_memory_are_not_stopped(tmp_path, slow_hub):
    """The same download read into memory (urllib's read(), what requests' .content does): no file is written and
    a socket's recv moves no /proc/PID/io counter; its TCP socket's bytes move (evidence.tcp_bytes). Before them
    (2026-12-07, run here): stopped at the threshold, "rank(s) 0 never entered barrier", exit 1."""
    p, doc = run(tmp_path, "fetch0", env={"DOWNLOAD_URL": slow_hub})
    assert p.returncode == 0 and doc and doc["verdict"] == "pass", p.stderr[-4000:]
    assert doc["hang"] is None and doc["culprit_ranks"] == [] and "[hang]" not in p.stderr, p.stderr[-3000:]
    out = next(Path(doc["logs"]).glob("*/attempt_0/0/stdout.log")).read_text()
    assert f"rank 0 fetched {140 * 20_000} bytes" in out, out
    said = [line for line in p.stderr.splitlines() if "wait for busy" in line]
    assert said and "rank(s) 1 wait for busy rank 0 at " + str(JOB) in said[0], p.stderr[-3000:]


@pytest.mark.timeout(300)
def test_attach_on_a_rank_that_downloads_while_the_others_wait_names_no_culprit(tmp_path, slow_hub):
    """The same job under plain torchrun, read by attach while rank 0 downloads: waiting on a busy rank (or moving,
    once the download ends during the watch), exit 0, no rank named. Before the I/O rule: "rank(s) 0 never entered
    barrier", exit 1."""
    import json
    import subprocess
    import sys

    from tests.integration.test_attach import attach, kill_family

    work = tmp_path / "work"
    work.mkdir()
    env = dict(__import__("os").environ, START_UP_DIR=str(work), IMPORT_S="1", OMP_NUM_THREADS="1",
               DOWNLOAD_URL=slow_hub)
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(JOB),
                              "download0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (work / "model.bin").exists() and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.2)
        assert (work / "model.bin").exists(), "rank 0 never began its download"
        p = attach("--wait", "6", "--pid", str(agent.pid))  # this job: the suite's other worker runs jobs too
        assert p.stdout.strip(), p.stderr[-3000:]
        doc = json.loads(p.stdout)
        assert p.returncode == 0, (p.stderr[-2000:], doc.get("diagnosis"))
        assert doc["outcome"]["state"] in ("undecided", "progressing") and doc["outcome"]["culprits"] == [], doc
        if doc["outcome"]["state"] == "undecided":
            assert doc["outcome"]["category"] == "waiting_on_busy" and doc["diagnosis"]["busy"] == [0], doc["diagnosis"]
        assert agent.wait(120) == 0  # the job trained to its end
    finally:
        kill_family(agent)
