"""evidence.tcp_bytes: each TCP socket's bytes from the kernel's socket diagnostics, the sockets a process holds,
and the growth between two readings (what judge.policy's I/O rule adds to /proc/PID/io's counters)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from ddpdoctor.forensics.evidence import tcp_bytes


def connected_pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname(), timeout=10)
    accepted, _ = server.accept()
    return server, client, accepted


def test_a_recv_into_memory_shows_in_the_sockets_bytes_of_the_process_that_holds_them():
    """recv() moves no /proc/PID/io counter (measured: 6.5 MB received, rchar +102); the socket's own counts do."""
    server, client, accepted = connected_pair()
    try:
        before = tcp_bytes.held_by([os.getpid()], tcp_bytes.socket_bytes())
        accepted.sendall(b"x" * 1_000_000)
        got = 0
        while got < 1_000_000:
            got += len(client.recv(1 << 16))
        after = tcp_bytes.held_by([os.getpid()], tcp_bytes.socket_bytes())
        assert client.fileno() >= 0 and len(after) >= 2  # both ends of the connection are ours
        assert tcp_bytes.grown(before, after) >= 2_000_000  # sent by one end, received by the other
    finally:
        for s in (client, accepted, server):
            s.close()


def test_a_process_holds_only_its_own_sockets_and_a_gone_one_none():
    server, client, accepted = connected_pair()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = tcp_bytes.inodes_of(os.getpid())
        assert len(mine) >= 3 and not tcp_bytes.inodes_of(other.pid)
        assert tcp_bytes.inodes_of(2 ** 22 + 7) == set()  # no such process
    finally:
        other.kill()
        other.wait(timeout=10)
        for s in (client, accepted, server):
            s.close()


def test_growth_counts_each_socket_and_a_closed_one_takes_nothing_away():
    assert tcp_bytes.grown({1: 100, 2: 50}, {1: 400, 2: 50}) == 300
    assert tcp_bytes.grown({1: 900_000}, {2: 300_000}) == 300_000  # closed, then a new connection
    assert tcp_bytes.grown({1: 100}, {1: 90}) == 0 and tcp_bytes.grown({}, {}) == 0


def test_a_kernel_that_does_not_answer_leaves_no_bytes(monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError("sock_diag filtered")

    monkeypatch.setattr(tcp_bytes.socket, "socket", refused)
    assert tcp_bytes.socket_bytes() == {}


def test_another_namespace_is_joined_only_as_root(monkeypatch):
    """setns needs CAP_SYS_ADMIN: a user's attach counts this namespace's sockets and joins no other."""
    joined = []
    monkeypatch.setattr(tcp_bytes, "_namespace", lambda pid: 1 if pid == os.getpid() else 2)
    monkeypatch.setattr(tcp_bytes, "_in_namespace_of", lambda pid: joined.append(pid) or {99: 5})
    monkeypatch.setattr(tcp_bytes, "socket_bytes", lambda: {7: 1})
    monkeypatch.setattr(tcp_bytes.os, "geteuid", lambda: 1000)
    assert tcp_bytes.socket_bytes_for([os.getpid(), 4242]) == {7: 1} and joined == []
    monkeypatch.setattr(tcp_bytes.os, "geteuid", lambda: 0)
    assert tcp_bytes.socket_bytes_for([os.getpid(), 4242, 4343]) == {7: 1, 99: 5} and joined == [4242]
