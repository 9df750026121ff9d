"""`ddpdoctor attach` run by root beside a job of another user (``nobody``, tests/as_nobody.py) that names root's
things in its environment: what a job names is acted on only with the job's rights (ATTACH.md, "What attach
trusts"). One shared node per module: a root daemon (a FIFO it reads, a socket it serves in a 0700 folder,
files only root may read, one rewritten all the time), a root job and a job of nobody that share one
TORCHELASTIC_RUN_ID, every rank a stand-in (tests/integration/attach_standins.py: no torch). Each test
asserts the outcome (nothing written, read, connected or signalled) and the note attach shows instead."""
from __future__ import annotations

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

from tests.as_nobody import NOBODY, why_not
from tests.integration import attach_standins

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
STANDINS = Path(attach_standins.__file__)
RUN_ID = "shared-run-id-4711"
NOBODY_UID = 65534

ROOT_DAEMON = r'''
import os, socket, sys, threading, time
root, logs = sys.argv[1], sys.argv[2]
os.mkfifo(f"{root}/ctl0.pipe", 0o600)
fd = os.open(f"{root}/ctl0.pipe", os.O_RDONLY | os.O_NONBLOCK)
srv = socket.socket(socket.AF_UNIX)
srv.bind(f"{root}/sock4")
srv.listen(8)

def serve():
    while True:
        conn, _ = srv.accept()
        with open(f"{logs}/socket.log", "a") as fh:
            fh.write("connected\n")
        conn.close()

threading.Thread(target=serve, daemon=True).start()
open(f"{logs}/ready", "w").close()
while True:
    try:
        got = os.read(fd, 64)
    except BlockingIOError:
        got = b""
    if got:
        with open(f"{logs}/fifo.log", "ab") as fh:
            fh.write(got)
    with open(f"{root}/secret_3", "w") as fh:  # a root file that changes all the time, as a log does
        fh.write(sys.argv[3])
    time.sleep(0.2)
'''


def secret_record(marker: str) -> str:
    return json.dumps(attach_standins.record(marker))


class SharedNode:
    """Root's things, root's job and nobody's job (same run id), started; ``kill`` ends them all by their ids."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="ddpdoctor-trust-"))
        os.chmod(self.base, 0o755)
        self.root, self.logs, self.home = self.base / "root", self.base / "logs", self.base / "nobody"
        for d in (self.root, self.logs):
            d.mkdir(mode=0o700)
        self.home.mkdir()
        (self.home / "d1").mkdir()
        for d in (self.home, self.home / "d1"):
            os.chown(d, NOBODY_UID, NOBODY_UID)
        for name, marker in (("trace_1", "ROOTSECRET1"), ("secret_2", "ROOTSECRET2")):
            (self.root / name).write_text(secret_record(marker))
            os.chmod(self.root / name, 0o600)
        self.procs: list[subprocess.Popen] = []
        self.family: list[psutil.Process] = []  # every rank, kept: a launcher --stop ended leaves them to init
        try:
            self.daemon = self._start([sys.executable, "-c", ROOT_DAEMON, str(self.root), str(self.logs),
                                       secret_record("ROOTSECRET3")])
            self._wait_for([self.logs / "ready"])
            self.root_job = self._start(self._launcher(self.base / "rootjob", [{"WAITS": "1"}, {}], world=2))
            self.nobody_job = self._start([*NOBODY, *self._launcher(self.home, self.nobody_specs(), world=8)],
                                          LAUNCHER_SERVES=str(self.home / "ws5"))
            self._wait_for([self.home / f"ready{r}" for r in range(8)] + [self.base / "rootjob" / f"ready{r}"
                                                                          for r in range(2)] + [self.home / "ws5"])
            self.family = [*self.ranks(self.root_job), *self.ranks(self.nobody_job)]
            time.sleep(0.5)
        except BaseException:
            self.kill()
            raise

    def nobody_specs(self) -> list[dict]:
        h, r = str(self.home), str(self.root)
        pipe = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{h}/fr_",
                "TORCH_FR_DUMP_TEMP_FILE": f"{h}/trace_"}
        return [
            # 1: root's FIFO (a root daemon reads it) named as the job's dump pipe
            {**pipe, "ROLE": "foreign_pipe", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{r}/ctl", "WAITS": "1"},
            # 2: the dump's folder swapped for a link to root's folder after the request
            {**pipe, "ROLE": "dir_swap", "TORCH_FR_DUMP_TEMP_FILE": f"{h}/d1/trace_"},
            # 2: the dump file swapped for a link to a root-only file after the request
            {**pipe, "ROLE": "link_swap"},
            # 2: a root-only file (rewritten all the time) named as the dump file
            {**pipe, "ROLE": "root_file", "TORCH_FR_DUMP_TEMP_FILE": f"{r}/secret_"},
            # 4: root's socket in a 0700 folder named as the worker socket
            {"DDPDOCTOR_WORKER_SOCKET": f"{r}/sock{{rank}}"},
            # 4: a socket of the same user that another process (the launcher), not the rank, serves
            {"DDPDOCTOR_WORKER_SOCKET": f"{h}/ws{{rank}}"},
            # an honest rank: its own pipe, its own dump file
            {**pipe, "ROLE": "honest"},
            # an honest rank: its own worker socket
            {"ROLE": "honest_server", "DDPDOCTOR_WORKER_SOCKET": f"{h}/own{{rank}}.sock"},
        ]

    def _launcher(self, home: Path, specs: list[dict], world: int) -> list[str]:
        home.mkdir(exist_ok=True)
        os.chmod(home, 0o755)
        specs = [{"RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(world), "TORCHELASTIC_RUN_ID": RUN_ID,
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29977", "JOB_HOME": str(home), "ROOT_DIR": str(self.root),
                  **spec} for i, spec in enumerate(specs)]
        # run through a link named torchrun: the launcher table knows an agent by the program it runs
        # (launchers/agents.py), never by a word elsewhere on its command line
        agent = home / "torchrun"
        if not agent.exists():
            agent.symlink_to(STANDINS)
        return [sys.executable, str(agent), "launcher", "torchrun-stand-in", json.dumps(specs)]

    def _start(self, argv: list[str], **env) -> subprocess.Popen:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "DDPDOCTOR", "RANK", "WORLD"))}
        p = subprocess.Popen(argv, env={**clean, **env}, cwd="/", start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=open(self.logs / f"{len(self.procs)}.err", "wb"))
        self.procs.append(p)
        return p

    def _wait_for(self, paths: list[Path], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in paths):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                errs = " | ".join(f.read_text()[-600:] for f in sorted(self.logs.glob("*.err")))
                pytest.fail(f"the stand-ins never got ready: missing {[str(p) for p in paths if not p.exists()]}; "
                            f"{errs}")
            time.sleep(0.1)

    def ranks(self, launcher: subprocess.Popen) -> list[psutil.Process]:
        try:
            return psutil.Process(launcher.pid).children()
        except psutil.Error:
            return []

    def alive(self, launcher: subprocess.Popen) -> bool:
        return launcher.poll() is None and all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                               for p in self.ranks(launcher))

    def kill(self) -> None:
        family = list(self.family)
        for p in self.procs:
            try:
                family += psutil.Process(p.pid).children(recursive=True)
            except psutil.Error:
                pass
        for p in [*family]:
            try:
                p.kill()
            except psutil.Error:
                pass
        for p in self.procs:
            p.kill()
            p.wait(30)
        psutil.wait_procs(family, timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def node():
    if why_not():
        pytest.skip(why_not())
    made = SharedNode()
    try:
        yield made
    finally:
        made.kill()


def attach(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400", "DDPDOCTOR_NO_SAVE": "1"}
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--interval", "1", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def attached(node):
    """Root's attach on nobody's job, once: the terminal view, and attach.json (--output)."""
    out = node.base / "out"
    res = attach("--pid", str(node.nobody_job.pid), "--output", str(out), "--report", str(out / "report.html"))
    saved = out / "attach.json"
    assert saved.exists(), res.stdout + res.stderr
    doc = json.loads(saved.read_text())
    doc["_html"] = (out / "report.html").read_text()
    return res, doc


def said(res: subprocess.CompletedProcess, doc: dict) -> str:
    """Everything attach showed or kept: the terminal, attach.json and the HTML report."""
    return res.stdout + res.stderr + json.dumps(doc)


def notes(doc: dict) -> str:
    return "\n".join(doc.get("notes") or [])


def test_a_pipe_the_rank_does_not_hold_is_never_written(node, attached):
    """Issue #38, 1: root's FIFO named as rank 0's dump pipe gets no byte; the note says why."""
    res, doc = attached
    assert not (node.logs / "fifo.log").exists(), (node.logs / "fifo.log").read_bytes()
    text = notes(doc)
    assert f"rank 0: {node.root}/ctl0.pipe" in text and "not used" in text, text
    assert f"{node.root}/ctl0.pipe" in res.stdout and f"{node.root}/ctl0.pipe" in doc["_html"]  # shown too
    assert (node.home / "asked6").exists()  # the honest rank's own pipe was asked


def test_a_dump_file_behind_a_link_or_of_another_user_is_never_read(node, attached):
    """Issue #38, 2: a dump folder or file swapped for a link after the request, a root-only file named as the
    dump file: never opened as root, nothing of them shown; a note for each."""
    res, doc = attached
    shown = said(res, doc)
    for marker in ("ROOTSECRET1", "ROOTSECRET2", "ROOTSECRET3"):
        assert marker not in shown, marker
    text = notes(doc)
    assert "rank 1:" in text and "rank 2:" in text and "link" in text, text
    assert f"rank 3: {node.root}/secret_3" in text, text


def test_a_socket_the_rank_does_not_listen_on_is_never_connected(node, attached):
    """Issue #38, 4: root's socket in a 0700 folder, and a socket of the same user served by another process:
    no connection to either; a note for each."""
    res, doc = attached
    assert not (node.logs / "socket.log").exists()
    assert not (node.home / "ws5.log").exists()
    text = notes(doc)
    assert f"rank 4: {node.root}/sock4" in text and f"rank 5: {node.home}/ws5" in text, text


def test_the_jobs_own_pipe_dump_and_socket_still_answer(node):
    """What the job owns and holds is still read, with the job's rights (a child process as nobody): the honest
    ranks' records come back whole."""
    from ddpdoctor.forensics.attach import discover, dump_pipe, job_access

    job = discover.discover({node.nobody_job.pid}).jobs[0]
    honest = {rp.rank: rp for rp in job.ranks}
    assert honest[6].uid == NOBODY_UID and honest[7].worker_socket == f"{node.home}/own7.sock"
    got = dump_pipe.flight_record(honest[6], 20)
    assert got is not None and got["pg_config"]["0"]["desc"] == "HONEST6"
    served = job_access.worker_record(honest[7], 20)
    assert served is not None and served["pg_config"]["0"]["desc"] == "SERVED7"
    assert honest[4].worker_socket is None and honest[5].worker_socket is None  # not theirs: never asked


def test_no_local_leaves_the_node(node):
    """Issue #38, 7: what a node sends the master holds no local but the peer a send/recv names, and no secret
    (the ranks keep a GitHub token, a password and a database URL in their locals)."""
    from ddpdoctor.forensics.attach import discover, nodes
    from ddpdoctor.forensics.attach.sample import read_job

    job = discover.discover({node.nobody_job.pid}).jobs[0]
    reads = read_job(job, interval=0)
    assert any(r.readable for r in reads)
    wire = json.dumps([nodes.to_fact(r) for r in reads])
    for secret in ("ghp_Q7x9", "hunter2", "s3cr3t", "pw-Zk4"):
        assert secret not in wire
    names = {k for fact in json.loads(wire) for f in fact["frames"] or [] for k, _ in f[3]}
    assert names <= {"dst", "src", "group_dst", "group_src"}, names


def test_two_users_sharing_a_run_id_are_two_jobs_and_stop_signals_neither(node):
    """Issue #38, 3: root's job and nobody's share TORCHELASTIC_RUN_ID: `--job ID --stop` names both (exit 2),
    merges nothing and signals nobody."""
    res = attach("--job", RUN_ID, "--stop", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    said_ = " ".join(res.stderr.split())
    assert f"--pid {node.root_job.pid}" in said_ and f"--pid {node.nobody_job.pid}" in said_, said_
    assert "user root" in said_ and "user nobody" in said_ and "Traceback" not in said_, said_
    assert node.alive(node.root_job) and node.alive(node.nobody_job)


def test_stop_signals_only_the_judged_jobs_own_tree(node):
    """--stop on root's job (picked by --pid) ends root's launcher only; nobody's job runs on. Last: it ends a
    job of the module's node."""
    res = attach("--pid", str(node.root_job.pid), "--stop", "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["stopped"] == {"signal": "SIGTERM", "pids": [node.root_job.pid]}
    assert node.root_job.wait(30) == -signal.SIGTERM
    assert node.alive(node.nobody_job)
