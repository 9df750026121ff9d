"""What counts as progress for the hang watchdog and when silence becomes a hang: the ranks' logged steps, the
newest progress file, the ranks behind the others, the threshold (fixed, or calibrated from the job)."""
from __future__ import annotations

import json
from pathlib import Path

from . import evidence_io


COLLECTIVE_FRAMES = ("all_reduce", "allreduce", "barrier", "backward", "wait", "broadcast", "all_gather",
                     "reduce_scatter", "_engine_run_backward", "all_to_all", "recv", "send")


def last_steps(run_dir: Path) -> dict[int, int]:
    """Global rank -> last step it logged."""
    out = {}
    for path in (run_dir / "metrics").glob("rank*.jsonl"):
        try:
            lines = evidence_io.read_tail(path, 64 << 10).strip().splitlines()  # the last line is all it needs
            out[int(path.stem[4:])] = json.loads(lines[-1])["step"] if lines else 0
        except (OSError, ValueError, KeyError):
            continue
    return out


def progress_mark(run_dir: Path, logs: Path) -> float:
    """The newest modification time among the progress files: metrics, else the ranks' logs."""
    newest = 0.0
    for pattern in ((run_dir / "metrics").glob("rank*.jsonl"), logs.glob("*/attempt_*/*/std*.log")):
        for p in pattern:
            try:
                newest = max(newest, p.stat().st_mtime)
            except OSError:
                continue
    return newest


def behind(steps: dict[int, int], stacks: dict[int, str]) -> list[int]:
    """Ranks behind the others: a lower last step; or, all equal, the ranks not waiting inside a collective."""
    if steps and len(set(steps.values())) > 1:
        low = min(steps.values())
        return sorted(r for r, s in steps.items() if s == low)
    if stacks:
        outside = [r for r, text in stacks.items() if text and not any(f in text for f in COLLECTIVE_FRAMES)]
        if outside and len(outside) < len(stacks):
            return sorted(outside)
    return []


class Threshold:
    """When silence becomes a hang. Fixed (--hang-timeout), or calibrated from what the job has shown: a
    multiple of the longest gap between progress events after a warm-up, never under a floor, so a slow first
    step or an evaluation pause is no alarm. Calibrated, it is armed only once the job has made progress."""

    def __init__(self, fixed: float | None, floor: float = 30.0, factor: float = 5.0, warmup: int = 5):
        self.fixed, self.floor, self.factor, self.warmup = fixed, floor, factor, warmup
        self.events = 0
        self.last: float | None = None
        self.longest_gap = 0.0

    def progressed(self, now: float) -> None:
        if self.last is not None and self.events > self.warmup:
            self.longest_gap = max(self.longest_gap, now - self.last)
        self.events += 1
        self.last = now

    def value(self) -> float | None:
        if self.fixed is not None:
            return self.fixed
        if self.last is None:
            return None
        return max(self.floor, self.factor * self.longest_gap)

    def stalled(self, now: float, started: float) -> float:
        return now - max(self.last if self.last is not None else started, started)

    def fired(self, now: float, started: float) -> bool:
        limit = self.value()
        return limit is not None and self.stalled(now, started) > limit

    def describe(self) -> dict:
        if self.fixed is not None:
            return {"seconds": self.fixed, "source": "--hang-timeout", "why": "set by --hang-timeout"}
        why = (f"{self.factor:g} x its longest pause between two collectives or steps after a warm-up of "
               f"{self.warmup} ({self.longest_gap:.1f} s), and at least {self.floor:g} s")
        return {"seconds": round(self.value() or self.floor, 1), "source": "calibrated", "why": why}
