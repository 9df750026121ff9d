"""Unit tests of ddpdoctor/cluster/liveness.py: frozen nodes by their heartbeat, killed ones by their probe listener."""
from __future__ import annotations

import socket
import time

from ddpdoctor.cluster import liveness
from ddpdoctor.cluster.messages import Slot


class Beats:
    """A mailbox whose heartbeat values the test sets (the only call Heartbeats makes)."""

    def __init__(self, values):
        self.values = values

    def beats(self, slots):
        return {s: self.values.get(s.rank) for s in slots}


def _listening():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock, sock.getsockname()[1]


def _closed_port():
    sock, port = _listening()
    sock.close()
    return port


def test_in_the_collective_a_quiet_peer_with_a_closed_listener_is_named_killed_at_once(monkeypatch):
    # a peer SIGKILLed inside the collective was named only after SILENT_S as "frozen, stopped or stuck"
    alive, alive_port = _listening()
    try:
        nodes = [{"name": "a", "rank": 1, "claim": 0, "addr": "127.0.0.1", "probe_port": alive_port},
                 {"name": "b", "rank": 2, "claim": 0, "addr": "127.0.0.1", "probe_port": _closed_port()}]
        mb = Beats({1: 5, 2: 5})
        hb = liveness.Heartbeats(nodes)
        assert liveness.dead_or_silent(mb, hb, nodes, "during the collective", ping_after=2.5) == {}  # first read
        clock = time.monotonic() + 3.0
        monkeypatch.setattr(liveness.time, "monotonic", lambda: clock)
        mb.values[1] = 6  # a's heartbeat moves: not even probed
        out = liveness.dead_or_silent(mb, hb, nodes, "during the collective", ping_after=2.5)
        assert out == {"b": "stopped answering during the collective (its probe listener is gone: process killed?)"}
        # a quiet peer whose listener still accepts (SIGSTOP: the kernel accepts for it) is named after SILENT_S
        nodes[1]["probe_port"] = alive_port
        clock += liveness.SILENT_S
        mb.values[1] = 7
        out = liveness.dead_or_silent(mb, hb, nodes, "during the collective", ping_after=2.5)
        assert list(out) == ["b"] and "no heartbeat for" in out["b"] and "frozen" in out["b"]
    finally:
        alive.close()


def test_without_ping_after_every_node_is_probed(monkeypatch):
    nodes = [{"name": "b", "rank": 2, "claim": 0, "addr": "127.0.0.1", "probe_port": _closed_port()}]
    hb = liveness.Heartbeats(nodes)
    out = liveness.dead_or_silent(Beats({2: 1}), hb, nodes)  # its heartbeat just seen: the master probes anyway
    assert out == {"b": "stopped answering mid-preflight (its probe listener is gone: process killed?)"}
    assert hb.slots["b"] == Slot(2, 0)
