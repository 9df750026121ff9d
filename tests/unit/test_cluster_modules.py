"""The multi-node preflight's building blocks without a cluster: endpoint parsing and failure classes,
probe fan-out, signed messages, launcher environments, the probe listener on loopback."""
from __future__ import annotations

import errno
import socket
import time

import pytest

from ddpdoctor.cluster import endpoint as ep
from ddpdoctor.cluster import launcher_env
from ddpdoctor.cluster.probe import ProbeServer, best_sample, time_exchange
from ddpdoctor.cluster.view import FULL_MESH_MAX, ClusterView
from ddpdoctor.errors import UsageError


@pytest.mark.parametrize("text,host,port", [
    ("node0:29500", "node0", 29500), ("10.0.0.1:1", "10.0.0.1", 1), ("[fe80::1]:29500", "fe80::1", 29500),
    ("node0", "node0", 29400),
])
def test_parse_endpoint(text, host, port):
    e = ep.parse_endpoint(text, default_port=29400)
    assert (e.host, e.port) == (host, port)


@pytest.mark.parametrize("text,needle", [
    ("", "empty"), ("node0:http", "not a number"), ("node0:0", "1..65535"), ("fe80::1:29500", "brackets"),
    ("[fe80::1:29500", "unclosed"), ("node0", "no port"),
])
def test_bad_endpoints(text, needle):
    with pytest.raises(UsageError, match=needle):
        ep.parse_endpoint(text)


def test_str_brackets_ipv6():
    assert str(ep.Endpoint("fe80::1", 5)) == "[fe80::1]:5" and str(ep.Endpoint("h", 5)) == "h:5"


@pytest.mark.parametrize("exc,cls", [
    (socket.gaierror(-2, "Name or service not known"), ep.DNS),
    (socket.timeout("timed out"), ep.TIMED_OUT),
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), ep.REFUSED),
    (OSError(errno.EHOSTUNREACH, "no route"), ep.UNREACHABLE),
    (OSError(errno.ENETUNREACH, "unreachable"), ep.UNREACHABLE),
])
def test_failure_classes(exc, cls):
    assert ep.classify_oserror(exc) == cls
    assert ep.FIXES[cls]


def test_closed_port_is_refused_at_once_and_the_wait_is_bounded():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        res = ep.ping("127.0.0.1", port, 1.0)
        assert not res.ok and res.error_class == ep.REFUSED
        start = time.monotonic()
        out = ep.wait_for_endpoint(ep.Endpoint("127.0.0.1", port), time.monotonic() + 1.5, nnodes=2,
                                   allow_loopback=True)
        assert not out.ok and out.error_class == ep.REFUSED and out.attempts >= 1
        assert time.monotonic() - start < 5


def test_loopback_master_with_several_nodes_fails_without_waiting():
    start = time.monotonic()
    out = ep.wait_for_endpoint(ep.Endpoint("localhost", 29500), time.monotonic() + 30, nnodes=2,
                               allow_loopback=False)
    assert not out.ok and out.error_class == ep.LOOPBACK and time.monotonic() - start < 3


def nodes(n):
    return [{"name": f"n{i}", "rank": i, "addr": f"10.0.0.{i}", "probe_port": 1} for i in range(n)]


def test_full_mesh_up_to_64_nodes():
    ns = nodes(FULL_MESH_MAX)
    view = ClusterView(me=ns[3], nodes=ns, master=ns[0], endpoint="x:1")
    assert len(view.peers_to_probe()) == FULL_MESH_MAX - 1


def test_ring_plus_random_beyond_64_covers_every_node_deterministically():
    ns = nodes(300)
    probed_by: dict[str, int] = {}
    for me in ns:
        view = ClusterView(me=me, nodes=ns, master=ns[0], endpoint="x:1")
        peers = view.peers_to_probe()
        assert peers == view.peers_to_probe()  # deterministic: the same on every call
        assert 2 <= len(peers) <= 10 and me not in peers
        for p in peers:
            probed_by[p["name"]] = probed_by.get(p["name"], 0) + 1
    assert set(probed_by) == {n["name"] for n in ns}  # everyone is probed by someone (its ring neighbours)


def test_launcher_environments():
    tr = launcher_env.from_env({"GROUP_RANK": "2", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "n0",
                                "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"})
    assert (tr.source, tr.node_rank, tr.nnodes, tr.master, tr.nproc_per_node) == ("torchrun", 2, 2, "n0:29500", 8)
    sl = launcher_env.from_env({"SLURM_NODEID": "1", "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "gpu[07-09]"})
    assert (sl.source, sl.node_rank, sl.nnodes, sl.master) == ("slurm", 1, 3, "gpu07")
    pbs = launcher_env.from_env({"PBS_NODEFILE": "/f"}, read_file=lambda p: "a.x\na.x\nb.x\nc.x\n", hostname="b")
    assert (pbs.source, pbs.node_rank, pbs.nnodes, pbs.master) == ("pbs", 1, 3, "a.x")
    mpi = launcher_env.from_env({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"})
    assert (mpi.source, mpi.node_rank, mpi.nnodes) == ("mpi", 3, 4)
    assert launcher_env.from_env({}).source is None


@pytest.mark.parametrize("text,hosts", [
    ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
    ("a1,b[8-10]", ["a1", "b8", "b9", "b10"]),
    ("node[001-002]-ib", ["node001-ib", "node002-ib"]),
])
def test_slurm_nodelists(text, hosts):
    assert launcher_env.expand_slurm_nodelist(text) == hosts


def test_probe_listener_ping_time_and_garbage():
    with ProbeServer("127.0.0.1") as server:
        assert ep.ping("127.0.0.1", server.port, 2.0, payload=b"P\n").ok
        samples = time_exchange("127.0.0.1", server.port, samples=4)
        best = best_sample(samples)
        assert len(samples) == 4 and abs(best.offset_ms) < 50 and best.rtt_ms >= 0
        with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
            s.sendall(b"GARBAGE THAT IS NOT A COMMAND\n")
            s.settimeout(2)
            assert s.recv(16) == b""  # the server hangs up on nonsense instead of crashing
        assert ep.ping("127.0.0.1", server.port, 2.0, payload=b"P\n").ok  # and still serves others
    assert not ep.ping("127.0.0.1", server.port, 1.0).ok  # closed cleanly
