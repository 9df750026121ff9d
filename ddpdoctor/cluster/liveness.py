"""Liveness: which nodes stopped answering mid-run. A heartbeat counter that stops moving means a frozen
process (SIGSTOP, D state); a probe listener that refuses means a dead one."""
from __future__ import annotations

import time

from . import endpoint as ep
from .budget import SILENT_S
from .mailbox import TAMPERED, Mailbox
from .messages import Slot


class Heartbeats:
    """Which nodes' heartbeat counters have stopped moving: a frozen process (SIGSTOP, D state) cannot add."""

    def __init__(self, nodes: list[dict]):
        self.slots = {n["name"]: Slot(n["rank"], n["claim"]) for n in nodes}
        self.seen: dict[str, tuple[int, float]] = {}  # name -> (last value, when it last moved)
        self.tampered: set[str] = set()  # nodes whose heartbeat someone else overwrote: not judged by it

    def stalled(self, mb: Mailbox, names: list[str], after: float = SILENT_S) -> dict[str, float]:
        """Read the heartbeats of ``names`` once; those unchanged for ``after`` s, with the seconds of silence.
        A heartbeat overwritten by someone else, or going backwards (an old value replayed), proves nothing
        about the node: its silence clock restarts, so interference never blames a healthy node."""
        beats = mb.beats([self.slots[nm] for nm in names])
        now = time.monotonic()
        out = {}
        for nm in names:
            value = beats.get(self.slots[nm])
            value = 0 if value is None else value
            last, since = self.seen.get(nm, (-1, now))
            if value == TAMPERED or (isinstance(last, int) and isinstance(value, int) and value < last):
                self.tampered.add(nm)
                self.seen[nm] = (last, now)
                continue
            if value != last:
                self.seen[nm] = (value, now)
            elif now - since >= after:
                out[nm] = now - since
        return out


def dead_or_silent(mb: Mailbox, heartbeats: Heartbeats, watched: list[dict], when: str = "mid-preflight",
                   ping_after: float | None = None) -> dict[str, str]:
    """Of the ``watched`` roster entries, those that stopped answering, with why: a stalled heartbeat
    (frozen), or a probe listener that refuses (the process is gone). ``ping_after``: probe only the nodes
    whose heartbeat has not moved for that long (a killed node's stops too; None: probe every node)."""
    quiet = heartbeats.stalled(mb, [n["name"] for n in watched], after=SILENT_S if ping_after is None else ping_after)
    out: dict[str, str] = {}
    for n in watched:
        nm = n["name"]
        if quiet.get(nm, 0.0) >= SILENT_S:
            out[nm] = (f"stopped answering {when}: no heartbeat for {quiet[nm]:.0f} s "
                       f"(process frozen, stopped or stuck)")
            continue
        if ping_after is not None and nm not in quiet:
            continue
        res = ep.ping(n["addr"], n["probe_port"], 1.0)
        if not res.ok and res.error_class == ep.REFUSED:
            out[nm] = f"stopped answering {when} (its probe listener is gone: process killed?)"
    return out
