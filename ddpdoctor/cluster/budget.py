"""One deadline per cluster run: every wait, store call, probe and the collective take their limit from it.

With ``--timeout T`` a node ends (exit 0, 1 or 3) within ``2 T + SLACK_S`` seconds of its start:
  meet      until T: the nodes join; the master names the missing ones at T;
  work      the cluster checks and the collective share what is left before the verdict's reserve;
  verdict   the master publishes by ``end - VERDICT_RESERVE_S``; the others read it until ``end``.
A node found silent is not waited for again, so one frozen node costs the others at most its
detection time (SILENT_S), not a phase each.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

SLACK_S = 15.0
GRACE_S = 5.0  # how much longer a non-master waits for the roster than the master waits for the nodes
VERDICT_RESERVE_S = 4.0  # the master's verdict is out this long before the others give up on it
COLLECTIVE_RESERVE_S = 8.0  # after the collective: posting results, the master's comparison, the verdict
SILENT_S = 8.0  # a node whose heartbeat has not moved for this long is named silent (frozen or stuck)
PING_AFTER_S = 2.5  # in the collective, a peer whose heartbeat has not moved for this long has its probe listener tried
POLL_S = 0.2  # the longest pause between two looks at the store while waiting for a message
FIRST_POLL_S = 0.01  # the first pause of a wait, on a small cluster


def poll_delays(nnodes: int, cap: float = POLL_S) -> Iterator[float]:
    """The pauses of one wait (for a message, a key file, the master's port): short at first, doubling up to
    ``cap``. Why: a run is a chain of rounds (hello, roster, facts, go, results, verdict, done), each a wait
    for another node, and most answers come milliseconds after the wait starts; at a fixed 0.2 s poll every
    round added 0.1 s on average, most of a 3-node run's time beyond torch's own (bench_smoke_ratio.py).
    A long wait still polls every ``cap``; the first pause grows with the cluster (0.01 s per 4 nodes), so
    a large cluster asks the store no more often than at the fixed poll."""
    delay = min(cap, FIRST_POLL_S * max(1, nnodes // 4))
    while True:
        yield delay
        delay = min(cap, delay * 2)


@dataclass
class Budget:
    timeout: float
    start: float = field(default_factory=time.monotonic)

    @property
    def total_s(self) -> float:
        return 2 * self.timeout + SLACK_S

    @property
    def meet_by(self) -> float:
        return self.start + self.timeout

    @property
    def end(self) -> float:
        return self.start + self.total_s

    @property
    def verdict_by(self) -> float:
        return self.end - VERDICT_RESERVE_S

    def left(self, until: float | None = None) -> float:
        return max(0.0, (self.end if until is None else until) - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def collective_limit(self, wanted_s: float) -> float:
        """The process group's timeout: what the check asks for, capped by what the run has left."""
        return max(0.0, min(wanted_s, self.left(self.end - COLLECTIVE_RESERVE_S)))
