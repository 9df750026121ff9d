"""Folding the tracebacks in run-trainer's relayed output (the ranks', torchrun's failure table's): each shows
its last frames and its exception line on the terminal; the frames before them are one line saying where the
whole traceback is (the logs; -v relays everything). Other ranks' lines interleaved with one pass through."""
from __future__ import annotations

import re

KEEP_FRAMES = 2  # the innermost frames shown: where it failed and its caller
MAX_HELD = 2000  # lines held for one traceback at most: a longer one is relayed as it is
# torchrun's --tee prefixes each line with the rank ("[default1]:[rank1]: ", "[rank1]:"); its own lines have none.
PREFIX = re.compile(r"^(?P<prefix>(?:\[[^\]\n]{1,40}\]:){1,4})?(?P<rest>.*)$", re.S)
HEADER = "Traceback (most recent call last):"


class Folder:
    """Fed one relayed line at a time; returns the lines to show now. ``where``: the logs, as the fold line
    names them."""

    def __init__(self, where: str, keep: int = KEEP_FRAMES):
        self.where, self.keep = where, keep
        self._held: dict[str, tuple[int, list[str]]] = {}  # prefix -> (its separator's width, the lines so far)

    def feed(self, line: str) -> list[str]:
        m = PREFIX.match(line)
        prefix, rest = m["prefix"] or "", m["rest"]
        if prefix not in self._held:
            if rest.strip().endswith(HEADER):
                # torchrun writes "[rank1]: Traceback": the space after the prefix is no indentation; its
                # failure table "  traceback : Traceback ...", each frame indented under it
                self._held[prefix] = (len(rest) - len(rest.lstrip(" ")), [line])
                return []
            return [line]
        sep, held = self._held[prefix]
        held.append(line)
        if rest[sep:sep + 1] in (" ", "\t"):  # a frame, its code, its ^^^^ marker: indented
            if len(held) >= MAX_HELD:
                return self._held.pop(prefix)[1]
            return []
        return self._fold(self._held.pop(prefix)[1], prefix, sep)  # the exception line ends the traceback

    def flush(self) -> list[str]:
        """At the end of the stream: whatever is held, as it was."""
        out = [line for _, held in self._held.values() for line in held]
        self._held.clear()
        return out

    def _fold(self, block: list[str], prefix: str, sep: int) -> list[str]:
        head, body, last = block[0], block[1:-1], block[-1]
        starts = [i for i, line in enumerate(body) if PREFIX.match(line)["rest"].lstrip().startswith("File ")]
        if len(starts) <= self.keep:
            return block
        cut = starts[-self.keep]
        note = (f"{prefix}{' ' * sep}  ... {len(starts) - self.keep} earlier frame(s) folded: the whole traceback is in "
                f"{self.where} (-v shows it here)\n")
        return [head, note, *body[cut:], last]
