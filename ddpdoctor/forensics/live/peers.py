"""Several nodes, each watchdog seeing only its own ranks: a node whose ranks still start and work (their CPU time
grows before their first collective) says so to the others through the shared exchange folder, and a node whose
own ranks wait for them reads it as waiting on busy ranks (judge.policy), not as a hang.

Found 2026-12-07: node 1's ranks spent 45 s of CPU before init_process_group (a cold import from a shared
filesystem, the model built); node 0's watchdog saw its own ranks waiting there and none of its own moving, and
stopped the healthy job at the default threshold ("rank(s) 2, 3 never reached init_process_group")."""
from __future__ import annotations

import time
from pathlib import Path

from ..judge import policy
from . import exchange
from .stall import cpu_seconds


class PeerStart:
    def __init__(self, folder: Path, node: str, nnodes: int):
        self.folder, self.node, self.nnodes = folder, node, nnodes
        self.cpu: float | None = None  # this node's ranks' CPU seconds at the last poll of their start-up

    def note(self, done: dict, procs: list, running: list) -> None:
        """Each poll: while no rank here has completed a collective (``done``: rank -> collectives completed, None
        before the first) and their CPU time grew since the last poll, mark this node starting."""
        if self.nnodes < 2 or not done or any(v is not None for v in done.values()):
            self.cpu = None
            return
        cpu = sum(cpu_seconds(procs, running).values())
        if self.cpu is not None and cpu - self.cpu >= policy.CPU_MOVES_S:
            exchange.mark_starting(self.folder, self.node)
        self.cpu = cpu

    def elsewhere(self) -> list[str]:
        """The other nodes whose ranks still start and work (marks seen within policy.PEER_STARTING_FRESH_S)."""
        if self.nnodes < 2:
            return []
        now = time.time()
        return sorted(node for node, at in exchange.starting_marks(self.folder, exclude=self.node).items()
                      if now - at <= policy.PEER_STARTING_FRESH_S)

    def over(self, reading: policy.Reading) -> tuple[policy.Reading, list[str]]:
        """This node's reading, seen with the others: its ranks "hung" while another node's start and work are
        waiting on busy ranks there."""
        starting = self.elsewhere() if reading.motion is policy.JobMotion.HUNG else []
        if starting:
            reading = policy.Reading(policy.JobMotion.WAITING_ON_BUSY, reading.waiting)
        return reading, starting
