"""Folding the tracebacks in run-trainer's relayed output (the ranks', torchrun's, its failure table's): each is
one line on the terminal, its exception line, saying how many frames were folded and where the whole traceback
is (the logs; -v relays everything): the verdict that follows says where and why in the user's words. Other
ranks' lines interleaved with one pass through."""
from __future__ import annotations

import re

MAX_HELD = 2000  # lines held for one traceback at most: a longer one is relayed as it is
# torchrun's --tee prefixes each line with the rank ("[default1]:[rank1]: ", "[rank1]:"); its own lines have none.
# torchrun's --log-line-prefix-template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) puts any template of ${hostname},
# ${role_name}, ${rank}, ${local_rank} in place of "[default1]:": "node7:3: ", "default3: " as words ending in the
# rank, a colon and a space (an exception line, "RuntimeError: boom", has no rank there and is no prefix), and a
# traceback's lines keep the rank's own "[rank1]:" after it ("node7:1: [rank1]: Traceback ..."). torch 2.13 has no
# ${hostname} and writes the word as it is ("${hostname}:1: ").
TEMPLATE = r"(?:[^\s:\[\]]{0,64}:){0,2}[^\s:\[\]]{0,64}?\d{1,6}: "
PREFIX = re.compile(r"^(?P<prefix>(?:" + TEMPLATE + r")?(?:\[[^\]\n]{1,40}\]:){0,4})(?P<rest>.*)$", re.S)
HEADER = "Traceback (most recent call last):"


class Folder:
    """Fed one relayed line at a time; returns the lines to show now. ``where``: the logs, as the fold line
    names them."""

    def __init__(self, where: str):
        self.where = where
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
        frames = sum(PREFIX.match(line)["rest"].lstrip().startswith("File ") for line in block[1:-1])
        if not frames:
            return block
        head = PREFIX.match(block[0])["rest"]
        last = PREFIX.match(block[-1])["rest"].rstrip("\r\n")
        # what stood before "Traceback" (torchrun's "  traceback : "), then the exception line, then the note
        return [f"{prefix}{head[:head.index(HEADER)]}{last[sep:]}  [traceback folded: {frames} "
                f"frame{'s' if frames != 1 else ''}, the whole one in {self.where}; -v shows it]\n"]


def entry_point_named(script: str, bootstrap: str):
    """torchrun names the program it ran in its failure table (``<name> FAILED``): that is run-trainer's bootstrap,
    which then runs the user's script; on the terminal the table names the script, as a plain torchrun would."""
    header = f"{bootstrap} FAILED"

    def rename(line: str) -> str:
        return line.replace(header, f"{script} FAILED", 1) if line.rstrip("\r\n") == header else line

    return rename
