"""Multi-node preflight with real processes and real sockets: simulated nodes on 127.0.0.1/.2/.3."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.cluster.local import free_port
from ddpdoctor.cluster.local import kill_sessions
from tests import zygote

CLUSTER_CHECKS = "mesh,clock-skew,names,parity,launch-args,collective"
TIMEOUT = 20


class Cluster:
    """Starts nodes as separate `ddpdoctor preflight` processes and always kills what is left."""

    def __init__(self, nnodes: int, port: int | None = None):
        self.nnodes = nnodes
        self.port = port or free_port()
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, rank: int, *extra: str, env: dict | None = None, prefix: tuple[str, ...] = (),
              only: str = CLUSTER_CHECKS, timeout: float = TIMEOUT) -> subprocess.Popen:
        argv = [*prefix, sys.executable, "-m", "ddpdoctor", "preflight", "--master", f"127.0.0.1:{self.port}",
                "--nnodes", str(self.nnodes), "--node-rank", str(rank), "--local-addr", f"127.0.0.{rank + 1}",
                "--timeout", str(timeout), "--json", "--only", only, *extra]
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        proc = zygote.popen(argv, full_env, text=True)  # forked from a torch-imported server where that is the same
        self.procs[rank] = proc
        return proc

    def wait(self, limit: float) -> dict[int, tuple[int, dict | None, str]]:
        out = {}
        end = time.monotonic() + limit
        for rank, proc in self.procs.items():
            stdout, stderr = proc.communicate(timeout=max(1, end - time.monotonic()))
            try:
                doc = json.loads(stdout) if stdout.strip() else None
            except json.JSONDecodeError:
                doc = None
            out[rank] = (proc.returncode, doc, stderr)
        return out

    def kill_all(self) -> None:
        kill_sessions(list(self.procs.values()))


@pytest.fixture
def cluster_factory():
    made: list[Cluster] = []

    def make(n: int, port: int | None = None) -> Cluster:
        c = Cluster(n, port)
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill_all()


def _fails(doc: dict) -> list[dict]:
    return [r for r in doc["results"] if r["level"] == "fail"]


@pytest.mark.timeout(120)
def test_three_nodes_pass_and_agree(cluster_factory, tmp_path):
    c = cluster_factory(3)
    for r in range(3):
        c.start(r, "--output", str(tmp_path / f"out{r}"))
    res = c.wait(90)
    codes = {r: v[0] for r, v in res.items()}
    assert codes == {0: 0, 1: 0, 2: 0}, {r: v[2][-2000:] for r, v in res.items()}
    master_doc = res[0][1]
    assert master_doc["scope"] == "cluster" and master_doc["verdict"] in ("pass", "warn")
    assert len(master_doc["nodes"]) == 3
    # every node prints the same verdict and the same results
    for r in (1, 2):
        assert res[r][1]["verdict"] == master_doc["verdict"]
        assert [x["summary"] for x in res[r][1]["results"]] == [x["summary"] for x in master_doc["results"]]
    # the collective really ran: sum of ranks checked on every node
    coll = [x for x in master_doc["results"] if x["check"] == "collective"]
    assert len(coll) == 3 and all(x["level"] == "pass" and "sum of ranks correct (3)" in x["summary"] for x in coll)
    # each node probed both peers
    for node in master_doc["nodes"].values():
        probes = node["facts"]["mesh"]["probes"]
        assert len(probes) == 2 and all(p["ok"] for p in probes)
    # advice: the torchrun line for each node
    assert any("torchrun --nnodes 3" in line for line in master_doc["advice"])
    assert (tmp_path / "out0" / "cluster.json").exists()
    assert list((tmp_path / "out1").glob("node-*.json"))


@pytest.mark.timeout(60)
def test_master_absent_every_node_exits_3_saying_refused(cluster_factory):
    c = cluster_factory(3)
    start = time.monotonic()
    for r in (1, 2):
        c.start(r, timeout=4)
    res = c.wait(30)
    elapsed = time.monotonic() - start
    for r in (1, 2):
        code, _, err = res[r]
        assert code == 3, err
        assert "refused" in err and f"127.0.0.1:{c.port}" in err
        assert "Traceback" not in err
    assert elapsed < 4 + 5 + 20  # timeout + 5 s, plus interpreter start-up on a loaded 2-core box


@pytest.mark.timeout(90)
def test_missing_node_is_named_by_the_master(cluster_factory):
    c = cluster_factory(3)
    start = time.monotonic()
    c.start(0, timeout=8)
    c.start(1, timeout=8)
    res = c.wait(60)
    for r in (0, 1):
        code, _, err = res[r]
        assert code == 3, err
        assert "missing rank(s) 2" in err
    assert time.monotonic() - start < 8 + 5 + 30  # --timeout + 5 s to give up; 30 s: start-up, loaded 2-core box


def _fake_dist(root: Path, name: str, version: str) -> Path:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


@pytest.mark.timeout(120)
def test_package_version_differs_on_one_node(cluster_factory, tmp_path):
    c = cluster_factory(3)
    same = _fake_dist(tmp_path / "same", "ddpd-parity-probe", "1.0")
    odd = _fake_dist(tmp_path / "odd", "ddpd-parity-probe", "2.0")
    only = CLUSTER_CHECKS.replace(",collective", "") + ",packages"
    for r in range(3):
        path = odd if r == 2 else same
        c.start(r, only=only, env={"PYTHONPATH": f"{path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    res = c.wait(90)
    code, doc, err = res[0]
    assert code == 1, err
    parity = [x for x in _fails(doc) if x["check"] == "parity"]
    assert parity, doc["results"]
    odd_name = next(n for n, d in doc["nodes"].items() if d["rank"] == 2)
    hit = [x for x in parity if x["nodes"] == [odd_name]]
    assert hit and "ddpd-parity-probe 2.0" in hit[0]["summary"] and "1.0" in hit[0]["summary"]
    assert all(res[r][0] == 1 for r in (1, 2))


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt-get install faketime)")
def test_clock_skew_under_faketime_is_named(cluster_factory):
    c = cluster_factory(3)
    only = "clock-skew,launch-args"
    for r in range(3):
        prefix = ("faketime", "-f", "+5s") if r == 1 else ()
        c.start(r, only=only, prefix=prefix)
    res = c.wait(90)
    code, doc, err = res[0]
    assert code == 1, err
    skew = [x for x in _fails(doc) if x["check"] == "clock-skew"]
    odd_name = next(n for n, d in doc["nodes"].items() if d["rank"] == 1)
    assert len(skew) == 1 and skew[0]["nodes"] == [odd_name], doc["results"]
    assert 4000 < skew[0]["actual"]["offset_ms"] < 6000
    assert "ahead of the master" in skew[0]["summary"]


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt-get install faketime)")
def test_a_skewed_master_is_named_when_the_others_agree(cluster_factory):
    """faketime +5s on the master of 3: the two nodes that agree with each other once were the ones named."""
    c = cluster_factory(3)
    for r in range(3):
        c.start(r, only="clock-skew,launch-args", prefix=("faketime", "-f", "+5s") if r == 0 else ())
    res = c.wait(90)
    code, doc, err = res[0]
    assert code == 1, err
    (skew,) = [x for x in _fails(doc) if x["check"] == "clock-skew"]
    master = next(n for n, d in doc["nodes"].items() if d["rank"] == 0)
    assert skew["nodes"] == [master] and "(the master)" in skew["summary"], doc["results"]
    assert 4000 < skew["actual"]["offset_ms"] < 6000 and "ahead of the other nodes" in skew["summary"]


@pytest.mark.timeout(60)
def test_master_localhost_with_two_nodes_fails_at_once():
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="localhost", MASTER_PORT=str(port))
    start = time.monotonic()
    for rank in ("0", "1"):
        out = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--nnodes", "2", "--node-rank", rank],
                             capture_output=True, text=True, env=env, timeout=50)
        assert out.returncode == 3, out.stderr
        assert "loopback" in out.stderr and "MASTER_ADDR" in out.stderr
    assert time.monotonic() - start < 0 + 45  # no waiting (it cannot get better); 45 s: two interpreters' start-up


@pytest.mark.timeout(120)
def test_wrong_token_node_is_rejected_and_named(cluster_factory):
    c = cluster_factory(3)
    only = "launch-args,mesh"
    for r in range(3):
        c.start(r, only=only, env={"DDPDOCTOR_TOKEN": "wrong" if r == 2 else "s3cret"})
    res = c.wait(90)
    code, doc, err = res[0]
    assert code == 1, err
    rejected = [x for x in _fails(doc) if "rejected" in x["summary"]]
    assert rejected and "127.0.0.3" in rejected[0]["summary"] and "rank 2" in rejected[0]["summary"]
    assert len(doc["nodes"]) == 2
    code2, _, err2 = res[2]
    assert code2 == 3 and "rejected" in err2
    assert "s3cret" not in json.dumps(doc)


@pytest.mark.timeout(120)
def test_node_killed_mid_preflight_is_named(cluster_factory):
    c = cluster_factory(3)
    for r in range(2):
        c.start(r)
    victim = c.start(2)
    deadline = time.monotonic() + 60
    killed = False
    while time.monotonic() < deadline:  # bounded: read the victim's progress until it has joined
        line = victim.stderr.readline()
        if not line:
            break
        if "nodes joined as" in line:
            os.killpg(victim.pid, signal.SIGKILL)
            killed = True
            break
    assert killed, "the victim never reported joining"
    res = c.wait(90)
    for r in (0, 1):
        code, doc, err = res[r]
        assert code == 1, err
        dead = [x for x in _fails(doc) if x["check"] == "cluster"]
        assert dead and "stopped answering" in dead[0]["summary"] and "127.0.0.3" in dead[0]["summary"]


@pytest.mark.timeout(120)
def test_shared_dir_that_is_node_local_fails(cluster_factory, tmp_path):
    c = cluster_factory(3)
    for r in range(3):
        d = tmp_path / f"node{r}"
        d.mkdir()
        c.start(r, "--shared-dir", str(d), "--set", "shared-dir.visible_within_s=2", only="shared-dir,launch-args")
    res = c.wait(90)
    code, doc, err = res[0]
    assert code == 1, err
    fails = [x for x in _fails(doc) if x["check"] == "shared-dir"]
    names = {n for x in fails for n in x["nodes"]}
    ranks = {doc["nodes"][n]["rank"] for n in names}
    assert ranks == {1, 2}
    assert "node-local" in fails[0]["summary"]


@pytest.mark.timeout(150)
def test_local_nodes_demo_runs_the_whole_cluster():
    out = subprocess.run([sys.executable, "-m", "ddpdoctor", "-q", "preflight", "--local-nodes", "2", "--json",
                          "--only", CLUSTER_CHECKS, "--timeout", "20"], capture_output=True, text=True, timeout=140)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert doc["scope"] == "cluster" and len(doc["nodes"]) == 2
    assert doc["local_nodes"]["exit_codes"] == [0, 0]


@pytest.mark.timeout(150)
def test_runs_as_torchrun_worker_in_the_agents_store(tmp_path):
    """Two torchrun agents (two 'nodes' on this machine): local rank 0 of each node runs the node preflight."""
    port = free_port()
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "ddpdoctor", "preflight",
            "--only", "mesh,launch-args,clock-skew", "--json", "--timeout", "20"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        kill_sessions(procs)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    docs = [json.loads(out) for out, _ in outs]
    assert all(d["scope"] == "cluster" and d["verdict"] == "pass" for d in docs)
    launch = [r for r in docs[0]["results"] if r["check"] == "launch-args"]
    assert "--nnodes 2" in launch[0]["summary"] and "--nproc-per-node 1" in launch[0]["summary"]
