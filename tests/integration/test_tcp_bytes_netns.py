"""evidence.tcp_bytes across network namespaces: a container's rank, read by root from the host (attach), has its
TCP sockets in another namespace, which the host's sock_diag does not list; root reads them from a thread that
joined the rank's namespace. Run as root with iproute2 (CI), in a real network namespace."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

from ddpdoctor.forensics.evidence import tcp_bytes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")]

# A rank in its own namespace: a connection on its loopback, 1 MB through it, then it waits holding both ends.
RANK = """
import socket, sys, time
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
peer, _ = server.accept()
peer.sendall(b"x" * 1_000_000)
got = 0
while got < 1_000_000:
    got += len(client.recv(1 << 16))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def namespace():
    name = f"ddpd-tcp-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True, timeout=30)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@pytest.mark.timeout(60)
def test_root_reads_the_sockets_of_a_rank_in_another_network_namespace(namespace):
    rank = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c", RANK], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert rank.stdout.readline().strip() == "ready"
        held = tcp_bytes.inodes_of(rank.pid)  # `ip netns exec` execs the interpreter: the same pid
        assert len(held) >= 3
        assert not held & set(tcp_bytes.socket_bytes())  # the host's namespace does not list them
        here = socket.create_server(("127.0.0.1", 0))  # a socket of the host's namespace, listed beside them
        table = tcp_bytes.socket_bytes_for([rank.pid, os.getpid()])
        assert sum(table.get(inode, 0) for inode in held) >= 2_000_000  # sent by one end, received by the other
        assert tcp_bytes.inodes_of(os.getpid()) & set(table)
        here.close()
        assert os.readlink("/proc/thread-self/ns/net") == os.readlink("/proc/self/ns/net")  # no thread of ours moved
    finally:
        rank.kill()
        rank.wait(timeout=10)
