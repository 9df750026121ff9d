"""More of the cluster building blocks on loopback: DNS failures and progress in the master wait, launcher
precedence and fallbacks, token mismatches both ways, the probe listener under odd input and IPv6."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from ddpdoctor.cluster import endpoint as ep
from ddpdoctor.cluster import launcher_env
from ddpdoctor.cluster.probe import ProbeServer, best_sample, time_exchange


def test_unresolvable_master_fails_at_once_as_dns():
    out = ep.wait_for_endpoint(ep.Endpoint("no-such-host.invalid", 29500), time.monotonic() + 30, nnodes=2,
                               allow_loopback=False)
    assert not out.ok and out.error_class == ep.DNS and out.attempts == 0
    assert "no-such-host.invalid" in out.message and "/etc/hosts" in out.fix


def test_wait_reports_progress_and_succeeds_when_the_master_listens():
    seen = []
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        out = ep.wait_for_endpoint(ep.Endpoint("127.0.0.1", srv.getsockname()[1]), time.monotonic() + 10, nnodes=2,
                                   allow_loopback=True, on_attempt=lambda n, res, left: seen.append((n, res.ok, left)))
    assert out.ok and out.error_class is None and out.attempts == 1 and out.addr == "127.0.0.1"
    assert seen and seen[0][0] == 1 and seen[0][1] is True and 0 < seen[0][2] <= 10


def test_refused_wait_keeps_trying_until_the_deadline():
    seen = []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        out = ep.wait_for_endpoint(ep.Endpoint("127.0.0.1", s.getsockname()[1]), time.monotonic() + 1.2, nnodes=2,
                                   allow_loopback=True, on_attempt=lambda n, res, left: seen.append(n))
    assert out.error_class == ep.REFUSED and out.attempts >= 2 and seen == list(range(1, out.attempts + 1))
    assert out.seconds >= 1.0 and "start the master first" in out.fix


def test_ipv6_endpoint_and_loopback_detection():
    e = ep.parse_endpoint("[::1]:29500")
    assert (e.host, e.port, str(e)) == ("::1", 29500, "[::1]:29500")
    assert ep.is_loopback("::1") and ep.is_loopback("127.0.1.1") and not ep.is_loopback("10.0.0.1")
    assert not ep.is_loopback("not-an-address")


def test_launcher_precedence_and_fallbacks():
    both = {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "4", "SLURM_NODEID": "3", "SLURM_NNODES": "4"}
    assert launcher_env.from_env(both).source == "torchrun"  # the torchrun worker inside an srun job
    assert launcher_env.from_env(both).node_rank == 1 and launcher_env.from_env(both).nnodes == 4
    # NODE_RANK alone is a user's variable, not torchrun's.
    assert launcher_env.from_env({"NODE_RANK": "1"}).source is None
    mpich = launcher_env.from_env({"PMI_RANK": "2", "PMI_SIZE": "5", "MASTER_ADDR": "h0"})
    assert (mpich.source, mpich.node_rank, mpich.nnodes, mpich.master) == ("mpi", 2, 5, "h0")
    sl = launcher_env.from_env({"SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "a[1-2]",
                                "MASTER_ADDR": "a2"})
    assert (sl.nnodes, sl.master) == (2, "a2")  # an explicit MASTER_ADDR wins over the first listed host
    pbs = launcher_env.from_env({"PBS_NODEFILE": "/f", "PBS_NODENUM": "2"}, read_file=lambda p: "x\ny\nz\n",
                                hostname="elsewhere")
    assert (pbs.node_rank, pbs.nnodes, pbs.master) == (2, 3, "x")

    def unreadable(path):
        raise OSError("gone")

    assert launcher_env.from_env({"PBS_NODEFILE": "/f"}, read_file=unreadable).nnodes is None


def test_probe_survives_long_binary_and_concurrent_clients():
    with ProbeServer("127.0.0.1") as server:
        for junk in (b"\x00\xff" * 5000, b"T" * 100 + b"\n", b"\n"):
            with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
                s.sendall(junk)
                s.settimeout(2)
                try:
                    data = s.recv(64)
                except ConnectionResetError:  # unread input at close may reset instead of FIN
                    data = b""
                assert not data.startswith(b"T ")  # never answered as a time request
        results = []
        threads = [threading.Thread(target=lambda: results.append(ep.ping("127.0.0.1", server.port, 3.0,
                                                                          payload=b"P\n").ok)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == [True] * 20


def test_time_exchange_rejects_a_bad_reply_as_oserror():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)

        def answer_nonsense():
            conn, _ = srv.accept()
            with conn:
                conn.recv(16)
                conn.sendall(b"HELLO\n")

        t = threading.Thread(target=answer_nonsense, daemon=True)
        t.start()
        with pytest.raises(OSError, match="bad time reply"):
            time_exchange("127.0.0.1", srv.getsockname()[1], samples=2, timeout=2)
        t.join(5)
    assert best_sample([]) is None


def test_probe_on_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        server = ProbeServer("::1")
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with server:
        assert ep.ping("::1", server.port, 2.0, payload=b"P\n").ok
        assert len(time_exchange("::1", server.port, samples=2)) == 2


def test_junk_after_ipv6_bracket_is_a_usage_error():
    from ddpdoctor.errors import UsageError

    with pytest.raises(UsageError):
        ep.parse_endpoint("[::1]29501", default_port=29500)


def test_slurm_nodelist_with_two_bracket_groups():
    assert launcher_env.expand_slurm_nodelist("rack[1-2]-node[01-02]") == [
        "rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]
