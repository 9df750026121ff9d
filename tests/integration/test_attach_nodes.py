"""`ddpdoctor attach --master` on several nodes (process-nodes on 127.0.0.x, as tests/README describes): a job of
two torchrun agents (2 ranks each, gloo, a 30-minute timeout, rank 1 stuck in its own code); the same attach
command on every node; the nodes meet as preflight's do; the master prints one verdict naming rank, host and
line, a node with no rank of the job says so, and a node that never joins is named (exit 3)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.cluster.local import free_port
from tests.integration.test_attach import kill_family

pytestmark = pytest.mark.slow
JOB = Path(__file__).with_name("attach_job.py")


@pytest.fixture
def two_node_job(tmp_path):
    port = free_port()
    env = dict(os.environ, ATTACH_DIR=str(tmp_path), ATTACH_SHAPE="stuck", OMP_NUM_THREADS="1")
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(n), "--nproc-per-node",
         "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "attach-nodes", str(JOB)],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(2)]
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not all((tmp_path / f"ready{r}").exists() for r in range(4)):
            assert time.monotonic() < deadline and all(a.poll() is None for a in agents), "the job never got ready"
            time.sleep(0.5)
        time.sleep(1.0)
        yield agents, idle
    finally:
        for p in (*agents, idle):
            kill_family(p)  # torchrun's workers sit in sessions of their own: killed by their ids


def attach_nodes(pids: list[int], nnodes: int, meet_timeout: float = 90) -> list[subprocess.CompletedProcess]:
    master = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "ddpdoctor", "attach", "--no-save", "--json", "--interval", "2", "--pid", str(pid),
         "--master", master, "--nnodes", str(nnodes), "--node-rank", str(i), "--local-addr", f"127.0.0.{i + 1}",
         "--meet-timeout", str(meet_timeout)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i, pid in enumerate(pids)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


@pytest.mark.timeout(600)
def test_three_nodes_one_verdict_and_a_node_without_ranks(two_node_job):
    agents, idle = two_node_job
    master, worker, empty = attach_nodes([agents[0].pid, agents[1].pid, idle.pid], 3)
    assert master.returncode == 1, master.stderr
    doc = json.loads(master.stdout)
    diag = doc["diagnosis"]
    assert diag["named"] == [1] and diag["culprits"][0]["where"].startswith(str(JOB)), diag
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1, 2, 3]
    assert diag["nodes_without_ranks"] and doc["job"]["ranks_elsewhere"] == []
    assert worker.returncode == 1 and empty.returncode == 1  # every node ends with the master's verdict
    assert all(a.poll() is None for a in agents)


@pytest.mark.timeout(600)
def test_a_node_that_never_joins_is_named(two_node_job):
    agents, _ = two_node_job
    master, worker = attach_nodes([agents[0].pid, agents[1].pid], 3, meet_timeout=45)
    assert master.returncode == 3, master.stdout + master.stderr
    said = " ".join(master.stderr.split())  # the error line may be wrapped to the terminal's width
    assert "2/3 nodes joined" in said and "missing rank(s) 2" in said and "Traceback" not in said, said


FAKE_MASTER = r'''
import socket, sys
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(16)
print(srv.getsockname()[1], flush=True)
answer = {"http": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "junk": b"\x00junk\xff" * 64,
          "close": b""}[sys.argv[1]]
while True:
    conn, _ = srv.accept()
    try:
        conn.settimeout(2)
        conn.recv(4096)
        conn.sendall(answer)
    except OSError:
        pass
    conn.close()
'''


@pytest.mark.timeout(240)
def test_a_master_that_is_not_ddpdoctor_is_one_line_and_exit_3():
    """Issue #38, 6: --master pointed at an HTTP server, a junk server, one that closes every connection, or a
    port nobody listens on: one error line each, exit 3, none of torch's C++ log or backtrace."""
    servers = [subprocess.Popen([sys.executable, "-c", FAKE_MASTER, kind], stdout=subprocess.PIPE, text=True)
               for kind in ("http", "junk", "close")]
    try:
        ports = [int(s.stdout.readline()) for s in servers] + [free_port()]
        nodes = [subprocess.Popen([sys.executable, "-m", "ddpdoctor", "attach", "--no-save", "--interval", "0",
                                   "--master", f"127.0.0.1:{port}", "--nnodes", "2", "--node-rank", "1",
                                   "--local-addr", "127.0.0.2", "--meet-timeout", "5"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for port in ports]
        for port, node in zip(ports, nodes):
            out, err = node.communicate(timeout=200)
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[ddpdoctor")]
            assert node.returncode == 3, (port, out, err)
            assert len(lines) == 1 and lines[0].startswith("Error:"), err
            for cpp in ("frame #", "Exception raised from", "TCPStore.cpp", "c10::", "Traceback"):
                assert cpp not in err, err
    finally:
        for s in servers:
            s.kill()
            s.wait(10)
