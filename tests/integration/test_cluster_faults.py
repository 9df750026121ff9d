"""Faults with real signals and real processes (issue 11): a worker or the master killed (-9) or frozen
(SIGSTOP) at each phase; the loopback mistake repeated; SIGTERM/SIGINT to --local-nodes; --local-nodes
from a directory that holds a `ddpdoctor/` folder; an absurd --nnodes.

Every surviving node ends with exit 1 or 3 within its budget (2 x --timeout + 15 s, budget.py, plus the
interpreter's start-up), naming the node that died or froze; never exit 4, never a traceback.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddpdoctor.cluster.local import free_port
from tests.cluster_procs import assert_clean, budget_s, cluster  # noqa: F401 - fixture

TIMEOUT = 15
ONLY = "mesh,launch-args,collective"

# The stderr line on the victim after which it is in that phase.
MARKERS = {
    "before-joining": {"worker": "reachable", "master": "hosting the rendezvous store"},
    "after-joining": {"worker": "nodes joined as", "master": "nodes joined as"},
    "during-collective": {"worker": "running the collective smoke test", "master": "running the collective smoke test"},
}
VICTIM_RANK = {"worker": 2, "master": 0}


def _names(text: str, victim_rank: int) -> bool:
    addr = f"127.0.0.{victim_rank + 1}"
    words = (addr, f"rank {victim_rank}", f"rank(s) {victim_rank}")
    return any(w in text for w in words)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill-9", "sigstop"])
@pytest.mark.parametrize("phase", list(MARKERS))
@pytest.mark.parametrize("victim", ["worker", "master"])
def test_node_killed_or_frozen_is_named_within_the_budget(cluster, victim, phase, sig):
    c = cluster(3)
    rank = VICTIM_RANK[victim]
    # the workers start once the master hosts its store: on a loaded 2-core box its torch import alone
    # can outlast a worker's --timeout, and that is not the fault under test
    # during the collective: the victim holds inside the process group until the signal comes (the whole
    # collective takes well under a second, and a node that already finished it is not the fault under test)
    held = {"DDPDOCTOR_TEST_COLLECTIVE_HOLD_S": "30"} if phase == "during-collective" else {}
    nodes = {0: c.start_master(only=ONLY, timeout=TIMEOUT, env=held if rank == 0 else None)}
    nodes.update({r: c.start(r, only=ONLY, timeout=TIMEOUT, env=held if rank == r else None) for r in (1, 2)})
    target = nodes[rank]
    marker = MARKERS[phase][victim]
    assert target.wait_for_line(marker, budget_s(TIMEOUT)), c.report()
    target.signal(sig)
    survivors = [n for r, n in nodes.items() if r != rank]
    for n in survivors:
        code = n.finish(budget_s(TIMEOUT) - (time.monotonic() - n.started))
        assert code is not None, f"still running past the budget of {budget_s(TIMEOUT)} s\n{c.report()}"
    for n in survivors:  # shown with -rP: how close each survivor came to its budget
        last = n.stderr.strip().splitlines()[-1][:300] if n.stderr.strip() else ""
        print(f"{victim} {phase} {sig.name}: rank {n.rank} exit {n.proc.returncode} after {n.elapsed:.1f} s "
              f"(budget {budget_s(TIMEOUT):.0f} s): {last}")
    for n in survivors:
        assert_clean(n)
        assert n.proc.returncode in (1, 3), c.report()
        assert n.elapsed <= budget_s(TIMEOUT), c.report()
        assert _names(n.stdout + n.stderr, rank), c.report()
        if victim == "worker" and phase != "before-joining" and sig == signal.SIGKILL:
            # a killed node is named as killed (its probe listener is gone), inside the collective too, where it
            # once waited out the heartbeat's 8 s and read "frozen, stopped or stuck"
            assert "probe listener is gone" in n.stdout, c.report()
    if sig == signal.SIGSTOP:
        assert target.proc.poll() is None  # it really was frozen all along (the finalizer resumes and kills it)


@pytest.mark.timeout(300)
def test_loopback_master_50_times_never_aborts():
    """Issue 11's abort (a race between threads importing torch) showed in 20 of 20 runs, and under load as
    another error: 50 runs, four at a time (the same 50 processes in about half the wall time on 2 cores,
    and more load on each, not less)."""
    from concurrent.futures import ThreadPoolExecutor

    port = free_port()
    argv = [sys.executable, "-m", "ddpdoctor", "preflight", "--master", f"127.0.0.1:{port}", "--nnodes", "2"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: subprocess.run(argv, capture_output=True, text=True, timeout=60), range(50)))
    for i, out in enumerate(runs):
        assert out.returncode == 3, (i, out.returncode, out.stderr[-2000:])
        assert "loopback" in out.stderr, (i, out.stderr[-2000:])
        assert "terminate called" not in out.stderr and "Traceback" not in out.stderr, (i, out.stderr[-2000:])
        assert len(out.stderr.strip().splitlines()) == 1, (i, out.stderr)


def _node_children(parent: psutil.Process, n: int, limit_s: float) -> list[psutil.Process]:
    """The node processes --local-nodes started (its direct children), once all n are there."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        kids = parent.children(recursive=True)
        if len([k for k in kids if k.ppid() == parent.pid]) >= n:
            return kids
        time.sleep(0.1)
    raise AssertionError(f"--local-nodes never started {n} nodes: {parent.children(recursive=True)}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_signal_to_local_nodes_leaves_no_process(sig):
    # SIGINT as a terminal's Ctrl-C finds it: a suite started in the background by a non-interactive shell
    # (`nohup bash -c '...' &`) passes SIGINT on as ignored, and Python then installs no KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "preflight", "--local-nodes", "3", "--only", ONLY,
                             "--timeout", "20", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            # the run must still be going when the signal comes: the protocol got faster than the
                            # 2 s below (it had ended, exit 0, before the signal); at worst the nodes wait here
                            env={**os.environ, "DDPDOCTOR_TEST_COLLECTIVE_HOLD_S": "30"})
    kids: list[psutil.Process] = []
    try:
        parent = psutil.Process(proc.pid)
        kids = _node_children(parent, 3, 60)
        time.sleep(2.0)  # the nodes are importing torch / meeting: the worst time to be left behind
        kids = parent.children(recursive=True)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        gone, alive = psutil.wait_procs(kids, timeout=10)
        assert not alive, f"left behind: {alive}\n{err.decode(errors='replace')[-2000:]}"
        assert proc.returncode in (130, 143), err.decode(errors="replace")[-2000:]
        assert b"Traceback" not in err and b"terminate called" not in err
    finally:
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.timeout(150)
def test_sighup_to_local_nodes_leaves_no_process_and_no_key_file(tmp_path):
    """A dropped ssh session (SIGHUP) while the run's key file exists: exit 129 like SIGTERM's 143, every node
    gone, the key file removed (3 of 9 SIGHUPs left it behind: the nodes were SIGKILLed, never unwound)."""
    keys = tmp_path / ".ddpdoctor" / "keys"
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "preflight", "--local-nodes", "3", "--only", ONLY,
                             "--timeout", "20", "--json", "--no-save"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "HOME": str(tmp_path)})
    kids: list[psutil.Process] = []
    try:
        parent = psutil.Process(proc.pid)
        kids = _node_children(parent, 3, 60)
        end = time.monotonic() + 60
        while time.monotonic() < end and not (keys.is_dir() and any(keys.iterdir())):
            time.sleep(0.05)
        assert keys.is_dir() and any(keys.iterdir()), "the master never wrote the run's key file"
        kids = parent.children(recursive=True)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=40)
        gone, alive = psutil.wait_procs(kids, timeout=10)
        assert not alive, f"left behind: {alive}\n{err.decode(errors='replace')[-2000:]}"
        assert proc.returncode == 129, (proc.returncode, err.decode(errors="replace")[-2000:])
        assert b"Traceback" not in err and b"terminate called" not in err
        assert not list(keys.iterdir()), list(keys.iterdir())
    finally:
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _console_script() -> str:
    """The installed `ddpdoctor` script: unlike `python -m`, it does not put the working directory first
    on sys.path, so the parent imports the real ddpdoctor and the children are the ones under test."""
    found = Path(sys.executable).with_name("ddpdoctor")
    return str(found) if found.exists() else shutil.which("ddpdoctor")


@pytest.mark.timeout(150)
def test_local_nodes_from_a_directory_holding_a_ddpdoctor_folder(tmp_path):
    fake = tmp_path / "ddpdoctor"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the fake ddpdoctor in the working directory was imported')\n")
    script = _console_script()
    assert script, "the ddpdoctor console script is not installed"
    proc = subprocess.Popen([script, "preflight", "--local-nodes", "2", "--only", "mesh,launch-args", "--timeout", "20",
                             "--json"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    assert "fake ddpdoctor" not in err
    doc = json.loads(out)
    assert len(doc["nodes"]) == 2 and doc["local_nodes"]["exit_codes"] == [0, 0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra", [["--master", "10.0.0.1:29500"], ["--master", "10.0.0.1:29500", "--node-rank", "0"],
                                   ["--local-addr", "127.0.0.1", "--master", "127.0.0.1:1"]],
                         ids=["master", "node-rank", "local-addr"])
def test_absurd_nnodes_is_a_one_line_usage_error(extra):
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--nnodes", "1000000000000000", *extra],
                         capture_output=True, text=True, timeout=50)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "--nnodes" in out.stderr, out.stderr
    assert out.stdout == ""
    assert time.monotonic() - start < 0 + 40  # no network wait at all; 40 s: an interpreter's start-up (1 s quiet), loaded box


@pytest.mark.timeout(120)
def test_a_master_that_is_not_ddpdoctors_is_one_error_line_without_torchs_backtrace():
    """An HTTP server on the master's port: torch's TCPStore client logs each failed ping with a C++ backtrace
    at ERROR level before it raises; the node says one line (exit 3) and nothing of torch's. A fresh
    interpreter (not forked from the test's torch-imported server): c10d reads its log level when torch loads."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.5)
    stop = threading.Event()

    def answer_http() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    conn.recv(64)
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nhello")
                except OSError:
                    pass

    threading.Thread(target=answer_http, daemon=True).start()
    try:
        env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
        out = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--master",
                              f"127.0.0.1:{srv.getsockname()[1]}", "--nnodes", "2", "--node-rank", "1",
                              "--local-addr", "127.0.0.2", "--timeout", "5", "--no-save"],
                             capture_output=True, text=True, timeout=100, env=env)
    finally:
        stop.set()
        srv.close()
    assert out.returncode == 3, out.stderr[-2000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "store did not answer" in errors[0], out.stderr[-2000:]
    assert "TCPStore.cpp" not in out.stderr and "frame #" not in out.stderr, out.stderr[-2000:]
