"""Display-safe text: what another node or process wrote, shown so a terminal cannot be steered by it. Below
the engines and the renderers alike (the cluster's progress lines and report/console.py both use it)."""
from __future__ import annotations

import re
from typing import Any

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), and the invisible
# bidirectional/zero-width marks that can make a line read differently from what it contains.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def safe_text(value: Any) -> str:
    """Text a terminal cannot be steered by: unsafe characters become visible escapes (``\\x1b``)."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                       text)
