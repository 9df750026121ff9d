"""Display-safe text: what another node or process wrote, shown so a terminal cannot be steered by it. Below
the engines and the renderers alike (the cluster's progress lines, report/console.py and the output
run-trainer relays from the job all use it)."""
from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

# Candidates: everything but tab, newline and printable ASCII. Of those, a character is escaped when it is a
# control (C0, DEL, C1: 0x9b is a one-byte CSI), a format character (every invisible and bidirectional mark:
# U+200B-U+200F, U+202A-U+202E, U+2066-U+2069, U+061C, U+FEFF, U+2060-U+2064, the soft hyphen, the tag
# characters), a surrogate, a private-use or an unassigned code point, or a line/paragraph separator: all that
# str.isprintable() refuses, by Unicode category rather than a hand list, except the visible spaces (Zs).
_CANDIDATE = re.compile("[^\t\n\x20-\x7e]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _unsafe(ch: str) -> bool:
    return not ch.isprintable() and unicodedata.category(ch) != "Zs"


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe_text(value: Any, keep: str = "") -> str:
    """Text a terminal cannot be steered by: unsafe characters become visible escapes (``\\x1b``, ``\\u202e``).
    ``keep`` names control characters let through (the relayed job output keeps ``\\r``: progress bars)."""
    text = value if isinstance(value, str) else str(value)
    return _CANDIDATE.sub(lambda m: m.group() if m.group() in keep or not _unsafe(m.group()) else _escaped(m.group()),
                          text)


def no_surrogates(text: str) -> str:
    """``text`` with every lone surrogate (a JSON ``\\ud800``, an undecodable file name's ``\\udcff``) as
    U+FFFD: UTF-8 cannot encode them, so a file or terminal write of them would raise."""
    return _SURROGATE.sub("\ufffd", text)


def doc_without_surrogates(doc: Any) -> Any:
    """A JSON document with no lone surrogate in any string or key: ``doc`` itself when it has none, else a
    copy through JSON with each one as U+FFFD."""
    text = json.dumps(doc, ensure_ascii=False, default=str)
    if not _SURROGATE.search(text):
        return doc
    return json.loads(no_surrogates(text))
