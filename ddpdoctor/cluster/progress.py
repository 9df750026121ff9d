"""Progress lines: short status lines on stderr, so a node waiting for its peers says what it waits for
(display-safe: text from other nodes is shown, its escape sequences never obeyed)."""
from __future__ import annotations

import sys

from ..text import safe_text


class Progress:
    """Short status lines on stderr, so a node waiting for its peers says what it waits for."""

    def __init__(self, quiet: bool, label: str):
        self.quiet = quiet
        self.label = label
        self._last = ""

    def say(self, text: str, *, dedupe: bool = False) -> None:
        if self.quiet or (dedupe and text == self._last):
            return
        self._last = text
        print(f"[ddpdoctor {self.label}] {safe_text(text)}", file=sys.stderr, flush=True)
