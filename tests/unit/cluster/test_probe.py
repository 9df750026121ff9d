"""Unit tests of ddpdoctor/cluster/probe.py."""
from __future__ import annotations

import socket
import threading

import pytest

from ddpdoctor.cluster import endpoint as ep
from ddpdoctor.cluster.probe import ProbeServer, best_sample, time_exchange


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
