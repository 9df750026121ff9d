"""The one parser for integers that come from outside (environment, file and folder names, JSON fields, flags).

`str.isdigit()` then `int()` is not a parser: '²' and '①' are digits to `isdigit` and not to `int`, and
'١٢' (Arabic-Indic) is an int to both. Every external string that should be an integer goes through
`parse_int`: ASCII digits only, an optional sign when allowed, a bounded length and value, else None.
"""
from __future__ import annotations

import re

_UNSIGNED = re.compile(r"[0-9]{1,19}")
_SIGNED = re.compile(r"[+-]?[0-9]{1,19}")
MAX_ABS = (1 << 63) - 1  # the widest integer torch, JSON readers and C helpers agree on


def parse_int(text: object, *, lo: int | None = 0, hi: int | None = MAX_ABS, signed: bool = False,
              strip: bool = True) -> int | None:
    """`text` as an int if it is ASCII digits (with a sign when `signed`) within [lo, hi], else None.

    An int passes through (bools do not: True is not a rank); anything else that is not a str is None.
    `strip` drops surrounding whitespace first, as `int()` does for the environment's values.
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        value = text
    elif isinstance(text, str):
        body = text.strip() if strip else text
        if not (_SIGNED if signed else _UNSIGNED).fullmatch(body):
            return None
        value = int(body)
    else:
        return None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        return None
    return value


def is_int_text(text: object, **bounds) -> bool:
    """True when `parse_int` would accept `text` (for sort keys and filters that keep the string)."""
    return parse_int(text, **bounds) is not None
