"""Message sizes: parsing `-b 8 -e 128M -f 2` like nccl-tests, and the sweep they describe."""
from __future__ import annotations

from ..errors import UsageError

SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# One buffer's largest size. Bigger than any GPU's share of a collective that tells something (nccl-tests
# sweeps stop at a few GiB); beyond it a typo (-b 1T) would fail inside torch's allocator with a traceback.
MAX_BUFFER_BYTES = 8 << 30


def parse_size(text: str | int, flag: str = "size") -> int:
    """'128M' -> 134217728. Binary multiples, as nccl-tests reads them; a bare number is bytes."""
    if isinstance(text, int):
        value = text
    else:
        raw = str(text).strip().upper()
        if raw.endswith("IB"):
            raw = raw[:-2]
        num, unit = raw, ""
        if raw and raw[-1] in SUFFIX:
            num, unit = raw[:-1], raw[-1]
        try:
            value = int(float(num) * SUFFIX[unit])
        except (ValueError, OverflowError):  # "x", "nan"; "inf" and 1e999 overflow int()
            raise UsageError(f"{flag} {text!r}: not a size (examples: 8, 64K, 128M, 1G)") from None
    if value <= 0:
        raise UsageError(f"{flag} {text!r}: must be positive")
    if value > MAX_BUFFER_BYTES:
        raise UsageError(f"{flag} {text!r}: above the largest buffer nccl-bench allocates ({human(MAX_BUFFER_BYTES)})")
    return value


def human(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*f, ... up to max inclusive (max itself is always measured, like nccl-tests)."""
    if min_bytes > max_bytes:
        raise UsageError(f"-b/--min-bytes {human(min_bytes)} is above -e/--max-bytes {human(max_bytes)}")
    if factor <= 1 and min_bytes != max_bytes:
        raise UsageError(f"-f/--step-factor {factor:g} must be above 1")
    sizes = []
    size = min_bytes
    while size < max_bytes and len(sizes) < 64:
        sizes.append(int(size))
        size = size * factor
    sizes.append(max_bytes)
    return sorted(set(sizes))
