"""Ranks waiting on a busy one, live (judge.policy's "waiting on a busy rank"): since when, the bound past which the
watchdog stops the job all the same, and the one line that says who waits for whom and where the busy rank stands."""
from __future__ import annotations

import time

from ...grouping import rank_ranges
from ..evidence.model import user_frame
from ..judge import policy


class BusyWait:
    """One episode at a time: it starts at the first reading of the job waiting on a busy rank and ends at any
    other reading or at progress. ``bound_s``: --busy-timeout (None: only the process group's own timeout ends
    it, through the watchdog's early evidence)."""

    def __init__(self, bound_s: float | None):
        self.bound_s = bound_s
        self.since: float | None = None
        self.line: str | None = None  # the episode's line, said once

    def observe(self, reading: policy.Reading, samples: dict, starting: list[str] | None = None) -> str | None:
        """The line to say now (an episode's start), else None. ``starting``: the other nodes whose ranks still
        start and work, which the waiting ranks here wait on (their own samples are that node's)."""
        if reading.motion is not policy.JobMotion.WAITING_ON_BUSY:
            self.since = None
            return None
        if self.since is not None:
            return None
        line = self.said_elsewhere(reading, starting) if starting else self.said(reading, samples)
        self.since, self.line = time.time(), line
        return self.line

    def reset(self) -> None:
        self.since = None

    def past_bound(self) -> bool:
        return self.bound_s is not None and self.since is not None and time.time() - self.since > self.bound_s

    def bound_words(self) -> str:
        return (f"it is stopped only if that lasts past --busy-timeout {self.bound_s:g} s"
                if self.bound_s is not None else
                "it is stopped only by your process group's own timeout (--busy-timeout sets a bound)")

    def said_elsewhere(self, reading: policy.Reading, nodes: list[str]) -> str:
        return (f"ddpdoctor: rank(s) {rank_ranges(reading.waiting)} wait for the ranks of {', '.join(nodes)}, still "
                f"starting there (their CPU time grows before their first collective: an import, the model): not a "
                f"hang while they work; {self.bound_words()}")

    def said(self, reading: policy.Reading, samples: dict) -> str:
        where = []
        for rank in reading.busy:
            sample = samples.get(rank)
            frame = user_frame(sample.frames) if sample is not None and sample.frames else None
            where.append(f"rank {rank}" + (f" at {frame.where} in {frame.function}" if frame else ""))
        bound = self.bound_words()
        return (f"ddpdoctor: rank(s) {rank_ranges(reading.waiting)} wait for busy {', '.join(where)}, working in "
                f"its own code (its CPU time, its stack, its bytes read or written, or a child process it waits for "
                f"moves): not a hang while it works; {bound}")
