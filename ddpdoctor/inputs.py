"""Reading files a user hands to ddpdoctor (result files, ddpdoctor.toml): bounded in size, depth and encoding.

The one input policy for files: never read more than a cap (a 1 GiB "result file" costs 64 MiB at most,
not 2 GiB of memory), never recurse without a bound (JSON nested 100,000 deep), and say in one line what
is wrong with a binary, UTF-16 or otherwise undecodable file. Every problem is a UsageError (exit 2)
naming the file.
"""
from __future__ import annotations

import codecs
import json
import os
import re
from pathlib import Path
from typing import Any

from .errors import UsageError

MAX_RESULT_BYTES = 64 << 20  # the largest result file seen (512 nodes + mesh probes) is ~4 MB
MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 64  # a result document is ~8 levels deep; far deeper is not ours, and recursion has to stop
# The longest wait any flag or config key accepts (timeouts): a week is not a typo, 1e300 s is.
MAX_TIMEOUT_S = 7 * 86400.0
# Nodes in one job, for every command: the largest clusters built today are ~12k nodes; more is a typo (and
# memory per rank in the master's bookkeeping).
MAX_NODES = 16384
# A run or rendezvous id: torchrun's --rdzv-id, a document's run_id and run-trainer's records directory at once.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
         (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def read_bounded(path: str | os.PathLike, cap: int) -> bytes:
    """The file's bytes; more than ``cap`` is an error found after reading cap + 1 bytes, never more."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(cap + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(raw) > cap:
        raise UsageError(f"{path}: larger than {_human(cap)}, the most ddpdoctor reads from one file")
    return raw


def decode_utf8(raw: bytes, name: str) -> str:
    """UTF-8 text (a UTF-8 BOM is tolerated); UTF-16/32 and binary data are named as such."""
    for bom, encoding in _BOMS:  # UTF-32 LE's BOM starts with UTF-16 LE's: test the longer first
        if raw.startswith(bom):
            raise UsageError(f"{name}: {encoding} text; ddpdoctor reads UTF-8 (convert with iconv -f {encoding} -t UTF-8)")
    nul = raw.find(b"\0")
    if nul >= 0:
        raise UsageError(f"{name}: binary data (a NUL byte at offset {nul}), not a JSON text file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): "
                         "binary or another encoding") from None


def parse_json(text: str, name: str, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with its recursion bounded: too deep is a usage error, not a RecursionError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}: not valid JSON (truncated or corrupt? {exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # the C parser stops at the interpreter's recursion limit
        raise UsageError(f"{name}: JSON nested deeper than {max_depth} levels") from None
    depth = nesting_depth(doc, max_depth)
    if depth > max_depth:
        raise UsageError(f"{name}: JSON nested deeper than {max_depth} levels")
    return doc


def nesting_depth(doc: Any, stop_at: int) -> int:
    """Depth of nested lists/dicts, iteratively (the report's code recurses, so it must not see more);
    stops counting once past ``stop_at``."""
    deepest = 0
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        deepest = max(deepest, depth)
        if deepest > stop_at:
            return deepest
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def load_json_file(path: str | os.PathLike, cap: int = MAX_RESULT_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file under the whole policy: size cap, encoding, depth."""
    name = str(path)
    return parse_json(decode_utf8(read_bounded(path, cap), name), name, max_depth)


def _human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def check_run_id(value: str, flag: str = "--rdzv-id") -> str:
    """The one rule for run and rendezvous ids, for every flag that takes one: a usage error otherwise."""
    if not RUN_ID.match(value or ""):
        raise UsageError(f"{flag} {value!r}: expected 1-64 characters of A-Z a-z 0-9 . _ - (starting with a "
                         "letter or digit)")
    return value
