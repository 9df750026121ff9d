"""Values as a person reads them (a byte count as 12 B, 1.5 KiB, 4 GiB), for every message and renderer."""
from __future__ import annotations


def human_bytes(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"
