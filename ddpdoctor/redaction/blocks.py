"""Secrets that span lines in free text: PEM and PGP private key blocks (also when a log tail cut off
their BEGIN line, or both their BEGIN and END lines), a YAML value on the line after its secret name
(``password:`` then the value, or a ``|`` block), and a JWT split across lines at its dots. ``block_spans``
finds them in a whole text; ``LineState`` follows a stream line by line (torchrun's output echoed to the
terminal and to agent.stderr.log), where no line sees the one before.

A key's body line is recognised on its own: nothing but 40 to 76 base64 characters (64 in PEM and PGP
armour), with upper- and lower-case letters and digits all present and the mix of a random string (at least
KEY_LINE_ENTROPY bits a character). Hex hashes (git SHAs, sha256 fingerprints) have a single letter case and
no such line holds a path, a word with spaces or a number, so ordinary log lines do not qualify. Every
pattern here is linear: bounded quantifiers, anchored at line starts or behind a word-boundary look-behind.
"""
from __future__ import annotations

import math
import re
from collections import Counter

from .names import is_secret_name

MAX_BLOCK_CHARS = 16384  # a 4096-bit RSA key in PEM is ~3.3 KB, an armoured PGP private key ~5-7 KB
MAX_VALUE_LINES = 64  # lines of one YAML block value
MAX_LINE_CHARS = 160  # a body line with its prefix and blanks: 44 + 16 + 78 + 16 characters at most
KEY_LINE_ENTROPY = 4.2  # random base64: ~5 bits a character over 40-64 characters; CamelCase words ~3.9

# A torchrun --tee prefix ("[default0]:") or a rank prefix ("[rank1]:") before a line's own text.
_PREFIX = r"(?:\[[A-Za-z0-9_.:-]{1,40}\]:?)?"
_PREFIX_RE = re.compile(_PREFIX)
_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_BODY_LINE = re.compile(r"^" + _PREFIX + r"[ \t]{0,16}(?P<b>[A-Za-z0-9+/]{40,76}={0,2})[ \t]{0,16}\r?$", re.M)
# Any armour line (a body line, the short last one, PGP's "=ab12" checksum), for walking back from an END.
_ARMOUR_LINE = re.compile(_PREFIX + r"[ \t]{0,16}=?[A-Za-z0-9+/]{1,76}={0,2}[ \t]{0,16}\r?")
_ARMOUR_HEADER = re.compile(_PREFIX + r"[A-Za-z][A-Za-z-]{0,31}:[ \t][^\n]{0,256}")  # PGP's "Version: GnuPG"
_YAML_KEY = re.compile(r"^(?P<indent>" + _PREFIX + r"[ \t]{0,40})(?:-[ \t]{1,4})?[\"']?"
                       r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})[\"']?[ \t]{0,8}:[ \t]{0,8}(?:[|>][-+0-9]{0,2})?"
                       r"[ \t]{0,8}\r?$", re.M)
_JWT_PART = r"[A-Za-z0-9_-]{8,2048}"
_JWT_DOT = r"(?:\.[ \t]{0,8}\r?\n[ \t]{0,8}|[ \t]{0,8}\r?\n[ \t]{0,8}\.|\.)"
_JWT_SPLIT = re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)" + _JWT_PART + _JWT_DOT + _JWT_PART + _JWT_DOT + _JWT_PART)
# One line of a JWT split at its dots: the header (eyJ...), a part between dots, the signature.
_JWT_LINE = re.compile(r"[ \t]{0,16}(?P<v>\.?[A-Za-z0-9_-]{8,2048}\.?)[ \t]{0,16}\r?\n?")


def key_like(line: str) -> bool:
    """A private key's body line: base64 with both letter cases and digits, as random as a key."""
    if not (any(c.isupper() for c in line) and any(c.islower() for c in line) and any(c.isdigit() for c in line)):
        return False
    counts = Counter(line)
    return -sum(n / len(line) * math.log2(n / len(line)) for n in counts.values()) >= KEY_LINE_ENTROPY


def _last_line(line: str) -> bool:
    """The short last line of a key's body: base64 padding, or letters mixed with digits."""
    return len(line) >= 4 and (line.endswith("=") or (any(c.isdigit() for c in line) and
                                                       any(c.isalpha() for c in line)))


def block_spans(text: str) -> list[tuple[int, int]]:
    """Every multi-line secret's value in ``text`` (overlapping spans are fine: the caller merges them)."""
    spans: list[tuple[int, int]] = []
    if "PRIVATE KEY" in text:
        _armoured(text, spans)
    if "\n" in text or len(text) <= MAX_LINE_CHARS:  # one longer line cannot be a body line
        spans += [m.span("b") for m in _BODY_LINE.finditer(text) if key_like(m["b"])]
    if ":" in text and "\n" in text:
        _yaml_values(text, spans)
    if "eyJ" in text and "\n" in text:
        spans += [m.span() for m in _JWT_SPLIT.finditer(text)]
    return spans


def _armoured(text: str, spans: list) -> None:
    """BEGIN ... END (or MAX_BLOCK_CHARS when there is no END); an END whose BEGIN was cut off: back from it
    over the armour lines before it."""
    pos = 0
    for m in _BEGIN.finditer(text):
        if m.start() < pos:
            continue
        end = _END.search(text, m.end(), m.end() + MAX_BLOCK_CHARS)
        if end:
            pos = end.start()
            spans.append((m.end(), pos))
        else:
            first = text.find("\n", m.end()) + 1 or len(text)
            pos = _armour_after(text, first)
            spans.append((first, pos - 1 if pos > first and text[pos - 1] == "\n" else pos))
    for m in _END.finditer(text):
        if any(start <= m.start() <= stop for start, stop in spans):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        start = line_start
        while start > 0 and line_start - start < MAX_BLOCK_CHARS:
            prev = text.rfind("\n", 0, start - 1) + 1
            if not _ARMOUR_LINE.fullmatch(text, prev, start - 1):
                break
            start = prev
        if start < line_start:
            spans.append((start, line_start))


def _armour_after(text: str, pos: int) -> int:
    """A BEGIN line whose END the text lacks (cut off, or a message that only names the format): the armour
    lines after it (headers, body lines), not the traceback that may follow."""
    start = pos
    while pos < len(text) and pos - start < MAX_BLOCK_CHARS:
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        if not (_ARMOUR_LINE.fullmatch(text, pos, end) or _ARMOUR_HEADER.fullmatch(text, pos, end)
                or (pos - start < 256 and not text[pos:end].strip())):
            break
        pos = end + 1
    return min(pos, len(text))


def _yaml_values(text: str, spans: list) -> None:
    for m in _YAML_KEY.finditer(text):
        if not is_secret_name(m["name"]):
            continue
        depth = len(m["indent"].expandtabs(4))
        pos = m.end() + 1
        for _ in range(MAX_VALUE_LINES):
            if pos >= len(text) or pos - m.end() > MAX_BLOCK_CHARS:
                break
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[pos:end]
            content = line.lstrip(" \t")
            if content.strip() and len(line) - len(content) <= depth:
                break  # back at the key's indentation: the next key, or the end of the value
            if content.strip():
                spans.append((end - len(content), end - (1 if line.endswith("\r") else 0)))
            pos = end + 1


class LineState:
    """The multi-line context of a stream read one line at a time: inside a key block (after its BEGIN line,
    or after a body line), under a secret YAML key, inside a split JWT. ``spans(line)`` says what of this
    line to cut; lines are whole (a trailing newline or none)."""

    def __init__(self) -> None:
        self._in_key = ""  # "begin": after a BEGIN line; "body": after a body line whose BEGIN was not seen
        self._headers = 0  # armour header lines still allowed after a BEGIN
        self._yaml_depth: int | None = None
        self._jwt = 0  # JWT parts still expected on the next lines

    def spans(self, line: str) -> list[tuple[int, int]]:
        start = _PREFIX_RE.match(line).end()
        body = line[start:].rstrip("\r\n")
        stripped = body.strip(" \t")
        at = start + (len(body) - len(body.lstrip(" \t")))
        whole = [(at, at + len(stripped))] if stripped else []
        if _END.search(body):
            self._in_key = ""
            return []
        if self._in_key == "begin":
            if _ARMOUR_LINE.fullmatch(body):
                return whole
            if (_ARMOUR_HEADER.fullmatch(body) or not stripped) and self._headers > 0:
                self._headers -= 1
                return whole  # PGP's "Version:"/"Comment:" headers and the blank line after them
            self._in_key = ""
        elif self._in_key == "body":
            if _ARMOUR_LINE.fullmatch(body) and (key_like(stripped) or _last_line(stripped)):
                return whole
            self._in_key = ""
        if _BEGIN.search(body):
            self._in_key, self._headers = "begin", 4
            return []
        if _BODY_LINE.match(body) and key_like(stripped):
            self._in_key = "body"  # a body line without its BEGIN: the armour lines after it are the key's too
            return whole
        return self._yaml(body, whole) or self._split_jwt(body, whole)

    def _yaml(self, body: str, whole: list) -> list:
        depth = len(body.expandtabs(4)) - len(body.expandtabs(4).lstrip(" \t"))
        if self._yaml_depth is not None:
            if body.strip() and depth > self._yaml_depth:
                return whole
            if body.strip():
                self._yaml_depth = None
        key = _YAML_KEY.match(body)
        if key and is_secret_name(key["name"]):
            self._yaml_depth = len(key["indent"].expandtabs(4))
        return []

    def _split_jwt(self, body: str, whole: list) -> list:
        part = _JWT_LINE.fullmatch(body)
        if part and (self._jwt or (part["v"].startswith("eyJ") and part["v"].endswith("."))):
            self._jwt = 2 if not self._jwt else self._jwt - 1
            return whole
        self._jwt = 0
        return []
