"""Progress lines: short status lines on stderr, so a node waiting for its peers says what it waits for
(display-safe: text from other nodes is shown, its escape sequences never obeyed). On a terminal, a state that
changes while the node waits (who has joined, whose results are awaited) is one line updated in place (rich's
status spinner); elsewhere (a pipe, a scheduler's log file) a new waiting state (another phase) is a plain line at
once, and changes of the same one (who has joined, whose results are still awaited) at most every PLAIN_EVERY_S (as
run-trainer's progress is every 30 s): a line at every change made the log grow with the node count."""
from __future__ import annotations

import re
import sys
import time

from ..text import safe_text


PLAIN_EVERY_S = 5.0  # a waiting state's plain lines (not a terminal): at most one this often


class Progress:
    """Short status lines on stderr, so a node waiting for its peers says what it waits for."""

    def __init__(self, quiet: bool, label: str, live: bool | None = None):
        self.quiet = quiet
        self.label = label
        self._last = ""
        self.live = _terminal() if live is None else live
        self._status = None  # rich's Status while a waiting state is shown in place
        self._plain_at, self._plain_topic = 0.0, ""  # when a waiting state was last a plain line, and which one

    def say(self, text: str, *, dedupe: bool = False) -> None:
        """A line; ``dedupe``: a waiting state, said again each poll (only a change is shown; on a terminal it
        replaces the state before it, in place)."""
        if self.quiet or (dedupe and text == self._last):
            return
        if dedupe and not self.live:
            topic = _topic(text)
            if topic == self._plain_topic and time.monotonic() - self._plain_at < PLAIN_EVERY_S:
                return  # said at a later poll if it still holds then
            self._plain_at, self._plain_topic = time.monotonic(), topic
        self._last = text
        line = f"[ddpdoctor {self.label}] {safe_text(text)}"
        if dedupe and self.live:
            self._show_in_place(line)
            return
        if self._status is not None:
            self._status.console.print(_text(line), soft_wrap=True)  # above the spinner, kept
        else:
            print(line, file=sys.stderr, flush=True)

    def _show_in_place(self, line: str) -> None:
        try:
            if self._status is None:
                from rich.console import Console

                self._status = Console(stderr=True, highlight=False).status(_text(line))
                self._status.start()
            else:
                self._status.update(_text(line))
        except Exception:  # noqa: BLE001 - a display problem never stops a node: plain lines from here on
            self.live, self._status = False, None
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """The node is done (or unwinding): the spinner goes; what was said as lines stays."""
        if self._status is not None:
            status, self._status = self._status, None
            try:
                status.stop()
            except Exception:  # noqa: BLE001 - the node's result matters, not its spinner
                pass


def _topic(text: str) -> str:
    """Which waiting state a line is, whoever it names: "#/# nodes joined", "waiting for the check results"."""
    return re.sub(r"\d+", "#", text).split(":")[0].split(" of ")[0]


def _text(line: str):
    from rich.text import Text

    return Text(line)  # never markup: host names come from other nodes


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
