"""Preflight launched the way users type it, every check on (no --only): two nodes on 127.0.0.2/.3 with flags,
two torchrun agents on one machine, and Open MPI's mpiexec with several ranks on one host. A healthy setup is
exit 0 with no finding the launch itself causes, and one summary. (Each of these once failed or warned: the
master on 127.0.0.2 "reaches the master through None", torchrun's CPU nodes "1 GPU(s) expected" and
"MASTER_ADDR=127.0.0.2 ... would dial themselves", a torchrun line made of torchrun's own store port, and
mpiexec's only node waiting as a client for itself.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.cluster.local import free_port, kill_sessions

# What depends on the machine, not on the launch: this VM's clock is not NTP-synchronised, a small one may
# have little /dev/shm. Every other check must be quiet on a healthy launch.
MACHINE_CHECKS = {"clock-sync", "resources"}
ENV = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200")


def _run_all(argvs: list[list[str]], limit: float = 150) -> list[tuple[int, str, str]]:
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                              start_new_session=True) for a in argvs]
    try:
        outs = [p.communicate(timeout=limit) for p in procs]
    finally:
        kill_sessions(procs)
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


def _launch_findings(doc: dict, machine: set[str] = MACHINE_CHECKS) -> list[str]:
    return [f"{r['level']} {r['check']}: {r['summary']}" for r in doc["results"]
            if r["level"] in ("warn", "fail") and r["check"] not in machine]


def _machine_failed(doc: dict) -> bool:
    return any(r["level"] == "fail" for r in doc["results"] if r["check"] in MACHINE_CHECKS)


def _one_summary(res: list[tuple[int, str, str]], nnodes: int) -> None:
    summaries = [out for _, out, _ in res if f"[cluster: {nnodes} node" in out]
    assert len(summaries) == 1, [out[-500:] for _, out, _ in res]
    assert sum(out.count("verdict:") for _, out, _ in res) == len(res)  # the others: one line each
    assert not any("Traceback" in err for _, _, err in res)


@pytest.mark.timeout(150)
def test_two_nodes_on_127_0_0_2_and_3_healthy_every_check(tmp_path):
    port = free_port()
    argv = lambda rank: [sys.executable, "-m", "ddpdoctor", "preflight", "--master", f"127.0.0.2:{port}",  # noqa: E731
                         "--nnodes", "2", "--node-rank", str(rank), "--local-addr", f"127.0.0.{rank + 2}",
                         "--timeout", "30", "--output", str(tmp_path)]
    res = _run_all([argv(0), argv(1)])
    doc = json.loads((tmp_path / "cluster.json").read_text())
    assert not _launch_findings(doc), _launch_findings(doc)
    assert [code for code, _, _ in res] == [1 if _machine_failed(doc) else 0] * 2, [e[-1500:] for _, _, e in res]
    _one_summary(res, 2)


@pytest.mark.timeout(150)
def test_two_torchrun_agents_on_one_machine_healthy_every_check(tmp_path):
    """With 3 processes on one node and 1 on the other (legal): WORLD_SIZE 4 // LOCAL_WORLD_SIZE 1 once read as
    a 4-node job, and torchrun's own OMP_NUM_THREADS=1 (set where nproc > 1) as drift."""
    port = free_port()
    argv = lambda addr, n: [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", n,  # noqa: E731
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.2:{port}", "--local-addr", addr,
                            "-m", "ddpdoctor", "preflight", "--timeout", "30", "--output", str(tmp_path)]
    res = _run_all([argv("127.0.0.2", "3"), argv("127.0.0.3", "1")])
    doc = json.loads((tmp_path / "cluster.json").read_text())
    assert not _launch_findings(doc), _launch_findings(doc)
    assert [code for code, _, _ in res] == [1 if _machine_failed(doc) else 0] * 2, [e[-1500:] for _, _, e in res]
    _one_summary(res, 2)
    if not _machine_failed(doc):
        # torchrun's workers never see the --rdzv-endpoint typed: no line made of its store's port
        assert not any("--rdzv-endpoint" in line for line in doc["advice"]), doc["advice"]
        assert any("your torchrun command works" in line for line in doc["advice"]), doc["advice"]


@pytest.mark.timeout(150)
@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs Open MPI's mpiexec")
def test_mpiexec_several_ranks_on_one_host_is_one_node(tmp_path):
    port = free_port()
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    argv = ["mpiexec", *root, "--oversubscribe", "-n", "3", sys.executable, "-m", "ddpdoctor", "preflight",
            "--master", f"127.0.0.1:{port}", "--timeout", "30", "--output", str(tmp_path)]
    ((code, out, err),) = _run_all([argv])
    doc = json.loads(Path(tmp_path, "cluster.json").read_text())
    assert doc["run"]["nnodes"] == 1 and len(doc["nodes"]) == 1
    assert code == (1 if _machine_failed(doc) else 0), err[-2000:]
    assert out.count("verdict:") == 1 and "[cluster: 1 node]" in out, out[-1500:]
    # one node alone: a hostname on 127.x warns as in `ddpdoctor preflight` (a multi-node job would advertise it)
    assert not _launch_findings(doc, MACHINE_CHECKS | {"network"}), _launch_findings(doc)
