"""join and config: the typed request and launcher environments into a JoinConfig, the loopback mistake before any thread, and a
worker's waits that name what it refused."""
from __future__ import annotations

import time

import pytest

from ddpdoctor.cluster import join, launcher_env
from ddpdoctor.cluster.budget import Budget
from ddpdoctor.cluster.config import from_request
from ddpdoctor.cluster.messages import Finding
from ddpdoctor.cluster.progress import Progress
from ddpdoctor.cluster.worker import Worker
from ddpdoctor.errors import ClusterNotAssembled, UsageError
from ddpdoctor.preflight import PreflightRequest


def cfg(env=None, **kw):
    """A JoinConfig from a typed request and a recorded launcher environment (as preflight.run builds it)."""
    base = dict(master="10.0.0.1:29500", nnodes=2, node_rank=None, local_addr=None, timeout=10, token=None,
                nproc_per_node=None, rdzv_id=None, code_dir=None, shared_dir=None)
    base.update(kw)
    request = PreflightRequest(**base)
    return from_request(request, launcher_env.detect(env or {}, hosts=request.hosts, master=request.master),
                        quiet=True)


def test_flags_make_a_typed_config():
    c = cfg(node_rank=1, token="t")
    assert (c.master.host, c.master.port, c.nnodes, c.node_rank, c.token) == ("10.0.0.1", 29500, 2, 1, "t")


@pytest.mark.parametrize("kw, needle", [(dict(nnodes=10**15), "--nnodes"), (dict(node_rank=2), "--node-rank"),
                                        (dict(master=None), "no master"), (dict(nnodes=None), "number of nodes"),
                                        (dict(local_addr="not an addr:x"), "--local-addr")])
def test_bad_settings_are_usage_errors(kw, needle):
    with pytest.raises(UsageError, match=needle):
        cfg(**kw)


def test_a_second_process_on_a_node_stays_silent():
    assert cfg(env={"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                    "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, master="h:1", nnodes=None) is None


def test_hosts_give_the_rank_by_place(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "b")
    c = cfg(hosts=["a", "b", "c"], nnodes=None)
    assert (c.node_rank, c.nnodes, c.hosts, c.launcher) == (1, 3, ["a", "b", "c"], "hosts")


def test_the_loopback_mistake_fails_before_any_thread_or_import(monkeypatch):
    import threading

    before = threading.active_count()
    with pytest.raises(ClusterNotAssembled, match="loopback"):
        join.run_node(cfg(master="127.0.0.1:29500"), plan=None)
    assert threading.active_count() <= before + 1  # at most the abandoned lookup thread, never a gather


class FakeMailbox:
    def __init__(self, findings):
        self.findings = findings

    def read(self, kind, slot=None):
        return None


def test_a_worker_gives_up_naming_what_it_refused():
    worker = Worker.__new__(Worker)
    worker.cfg = cfg()
    worker.budget = Budget(10)
    worker.mb = FakeMailbox([Finding("verdict", "signature does not match this node's token")])
    worker.progress = Progress(True, "x")
    with pytest.raises(ClusterNotAssembled, match="signature does not match.*--token"):
        worker.wait_for("verdict", time.monotonic() + 0.3, "the verdict")


def test_the_launcher_is_detected_once_per_request(monkeypatch):
    calls = []

    def from_env(env, read_file=None, hostname=""):
        calls.append(dict(env))
        return launcher_env.LauncherInfo("slurm", node_rank=1, nnodes=2, master="n0")

    monkeypatch.setattr(launcher_env, "from_env", from_env)
    monkeypatch.setenv("SLURM_NODEID", "1")
    request = PreflightRequest(timeout=10)
    assert request.is_cluster() is True
    info = request.launcher()
    c = from_request(request, info, quiet=True)
    assert (c.node_rank, c.nnodes, c.launcher, c.master.host) == (1, 2, "slurm", "n0")
    assert len(calls) == 1  # is_cluster, launcher() and the config share one detection
    assert request.is_cluster({"X": "1"}) is True and len(calls) == 2  # a recorded env is read, never cached
    assert request.launcher() is info


def test_the_only_node_hosts_the_meeting_whatever_its_address():
    # `mpiexec -n 3 ddpdoctor preflight --master 127.0.0.1:PORT` on one host: local rank 0 speaks for the one
    # node, its rank is assigned on arrival; it once waited as a client for a master that was itself (exit 3)
    one = cfg(env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                   "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, master="127.0.0.1:29500", nnodes=None)
    assert (one.nnodes, one.node_rank) == (1, None)
    assert join._am_master(one, ["127.0.0.1"]) and join._am_master(one, ["10.9.9.9"])
    two = cfg(master="127.0.0.1:29500", nnodes=2)
    assert not join._am_master(two, ["127.0.0.1"])  # several nodes on loopback: a rank or --local-addr decides
