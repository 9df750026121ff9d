"""Values as a person reads them: the one spelling every renderer (terminal, HTML, panels) uses."""
from __future__ import annotations

from typing import Any

UNKNOWN = "—"


def human(value: Any) -> str:
    """A value as a person reads it: yes/no, "—" for unknown, an empty list "none", lists joined; never
    Python's True/None/[...]. Every renderer (terminal, HTML, the trainer's panel) shows values through it."""
    if value is True:
        return "yes"
    if value is False:
        return "no"
    if value is None:
        return UNKNOWN
    if isinstance(value, (list, tuple)):
        return ", ".join(human(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {human(v)}" for k, v in value.items()) or "none"
    return value if isinstance(value, str) else str(value)


def phrases(parts: list[str], width: int, sep: str = " · ", indent: str = "  ") -> list[str]:
    """Phrases joined by ``sep`` into lines of at most ``width`` columns, broken only between phrases (a header
    piped at 80 columns never splits 'loss 4.9 -> 3.0' or '7 skip'); a phrase longer than a line stands alone."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part if not lines else indent + part)
    return lines
