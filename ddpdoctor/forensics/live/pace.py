"""run-trainer's progress while the job runs, from what the hang watchdog reads each poll anyway: the steps the
ranks logged (the reference trainer's metrics) or, for any script, the collectives every rank completed. On a
terminal it is one status line under the relayed output, redrawn as the job moves; elsewhere (a pipe, a
scheduler's log) a plain line now and then, so a long job's log shows it is alive without flooding it."""
from __future__ import annotations

import time

PLAIN_EVERY_S = 30.0  # off a terminal: at most one line this often, and only when the job moved


class Pace:
    """Fed each poll (``observe``); says the job's progress through ``show`` (terminal: the status line) or
    ``say`` (a plain line). ``nnodes``: the job's nodes; each node's watchdog counts its own ranks' collectives, so
    on several nodes the line says they are this node's, never "every rank" of a world it did not read."""

    def __init__(self, show=None, say=None, clock=time.monotonic, nnodes: int = 1):
        self.show, self.say, self.clock, self.nnodes = show, say, clock, nnodes
        self.started = clock()
        self.moved_at: float | None = None
        self.last: tuple | None = None
        self.said_at = self.started
        self.said: str | None = None

    def observe(self, done: dict, steps: dict) -> None:
        now = self.clock()
        mark = (tuple(sorted(done.items())), tuple(sorted(steps.items())))
        if mark != self.last and (any(v for v in done.values() if v) or steps):
            self.last, self.moved_at = mark, now
        text = self.line(done, steps, now)
        if text is None:
            return
        if self.show is not None:
            self.show(text)
        elif self.say is not None and text != self.said and now - self.said_at >= PLAIN_EVERY_S:
            self.said, self.said_at = text, now
            self.say(text)

    def line(self, done: dict, steps: dict, now: float) -> str | None:
        """'ddpdoctor: step 120 on 2 ranks · last progress 1 s ago · 0:42 elapsed' (None before any progress)."""
        if steps:
            what = f"step {min(steps.values())}" + (f"-{max(steps.values())}" if len(set(steps.values())) > 1 else "")
            what += f" on {len(steps)} rank{'s' if len(steps) != 1 else ''}"
        else:
            counts = [v for v in done.values() if v is not None]
            if not counts or not any(counts):
                return None
            what = f"{min(counts)} collectives done on " + (
                f"each of this node's {len(counts)} ranks (one node of {self.nnodes})" if self.nnodes > 1
                else f"every rank of {len(counts)}")
        ago = "" if self.moved_at is None else f" · last progress {now - self.moved_at:.0f} s ago"
        elapsed = int(now - self.started)
        return f"ddpdoctor: {what}{ago} · {elapsed // 60}:{elapsed % 60:02d} elapsed"
