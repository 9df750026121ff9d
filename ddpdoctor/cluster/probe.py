"""The probe listener every node runs: a reachability target for its peers and a time echo for clock skew.

Protocol (line based, plain ASCII, one connection may carry many requests):
  ``P\\n``  -> ``P\\n``                       (reachability, round trip)
  ``T\\n``  -> ``T <t_recv> <t_send>\\n``     (server wall-clock times, for the NTP-style exchange)
socketserver is enough here: the traffic is a few bytes per peer, and the standard library keeps the
probe free of extra dependencies on every node.
"""
from __future__ import annotations

import socket
import socketserver
import threading
import time
from dataclasses import dataclass


class _Handler(socketserver.StreamRequestHandler):
    timeout = 5.0  # a peer that connects and says nothing must not hold a thread forever

    def handle(self) -> None:
        for _ in range(256):  # bounded: a client may ask many time samples on one connection, not forever
            try:
                line = self.rfile.readline(16)
            except OSError:
                return
            t_recv = time.time()
            if not line:
                return
            cmd = line.strip()
            if cmd == b"P":
                self.wfile.write(b"P\n")
            elif cmd == b"T":
                self.wfile.write(f"T {t_recv:.6f} {time.time():.6f}\n".encode())
            else:
                return
            self.wfile.flush()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog is 5: every node probing the master at once would overflow it, and
    # the kernel's dropped SYNs would read as a firewall DROP (timed out) on a perfectly good link.
    request_queue_size = 4096


class ProbeServer:
    """Listens on ``addr`` at an ephemeral port; ``close()`` stops it (also a context manager)."""

    def __init__(self, addr: str):
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        _Server.address_family = family
        self._server = _Server((addr, 0), _Handler)
        self.addr = addr
        self.port = self._server.server_address[1]
        # close() waits for the loop to notice: a short poll keeps that off the end of every run
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="ddpdoctor-probe", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "ProbeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class ClockSample:
    offset_ms: float  # peer clock minus this node's clock
    rtt_ms: float


def time_exchange(host: str, port: int, samples: int = 8, timeout: float = 2.0) -> list[ClockSample]:
    """NTP-style samples against a probe server: offset = ((t1 - t0) + (t2 - t3)) / 2, rtt = (t3 - t0) - (t2 - t1)."""
    out: list[ClockSample] = []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        for _ in range(samples):
            t0 = time.time()
            sock.sendall(b"T\n")
            reply = reader.readline(64)
            t3 = time.time()
            parts = reply.split()
            if len(parts) != 3 or parts[0] != b"T":
                raise OSError(f"bad time reply {reply!r}")
            t1, t2 = float(parts[1]), float(parts[2])
            offset = ((t1 - t0) + (t2 - t3)) / 2
            rtt = (t3 - t0) - (t2 - t1)
            out.append(ClockSample(offset_ms=offset * 1000, rtt_ms=max(rtt, 0.0) * 1000))
    return out


def best_sample(samples: list[ClockSample]) -> ClockSample | None:
    """The sample with the smallest round trip: its offset has the tightest error bound (rtt / 2)."""
    return min(samples, key=lambda s: s.rtt_ms, default=None)
