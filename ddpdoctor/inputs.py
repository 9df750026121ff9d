"""Reading files a user hands to ddpdoctor (result files, ddpdoctor.toml): bounded in size, depth and encoding.

The one input policy for files: never read more than a cap (a 1 GiB "result file" costs 64 MiB at most,
not 2 GiB of memory), never recurse without a bound (JSON nested 100,000 deep), and say in one line what
is wrong with a binary, UTF-16 or otherwise undecodable file. Every problem is a UsageError (exit 2)
naming the file.
"""
from __future__ import annotations

import codecs
import errno
import json
import os
import re
from pathlib import Path
from typing import Any

from .errors import UsageError
from .human import human_bytes

MAX_RESULT_BYTES = 64 << 20  # the largest result file seen (512 nodes + mesh probes) is ~4 MB
MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 64  # a result document is ~8 levels deep; far deeper is not ours, and recursion has to stop
# JSON values (counted as `,` `:` `[` `{`, four C-speed counts, before json.loads builds anything): the largest
# result file seen (512 nodes, or 64 ranks' metrics) holds ~300k; 64 MiB of `[],` would be 21 million lists
# (3.2 GB). Per file, and in total for one command that reads several (report).
MAX_JSON_VALUES = 4_000_000
# One command's inputs together (`ddpdoctor report a.json b.json ...`): at most this many files and bytes.
# With MAX_JSON_VALUES this bounds report's memory: about 2 x MAX_RESULT_BYTES transient (bytes, then text)
# plus ~100 B a value, ~0.5 GiB at worst, whatever the number or shape of the files.
MAX_INPUT_FILES = 256
MAX_TOTAL_BYTES = 128 << 20
# The longest wait any flag or config key accepts (timeouts): a week is not a typo, 1e300 s is.
MAX_TIMEOUT_S = 7 * 86400.0
# Nodes in one job, for every command: the largest clusters built today are ~12k nodes; more is a typo (and
# memory per rank in the master's bookkeeping).
MAX_NODES = 16384
# A run or rendezvous id: torchrun's --rdzv-id, a document's run_id and run-trainer's records directory at once.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
         (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


class Budget:
    """What one command may still read in total over all its input files (bytes, JSON values, files)."""

    def __init__(self, files: int = MAX_INPUT_FILES, nbytes: int = MAX_TOTAL_BYTES, values: int = MAX_JSON_VALUES):
        self.files, self.nbytes, self.values = files, nbytes, values

    def take_file(self, name: str) -> None:
        self.files -= 1
        if self.files < 0:
            raise UsageError(f"{name}: more than {MAX_INPUT_FILES} input files; merge fewer at a time")


class NotRegular(OSError):
    """A path that is a FIFO, a device, a socket or a directory where a file is to be read."""


def kind_of(mode: int) -> str:
    """'a FIFO', 'a character device', ... for a stat mode that is not a regular file's."""
    import stat

    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike) -> int:
    """THE way to open a file from a path a user or a file named: a read-only descriptor of a regular file.
    A FIFO, device, socket or directory is refused (NotRegular, an OSError saying which) before open(): a
    FIFO would block open() until a writer came, /dev/zero never ends. The open is O_NONBLOCK and checked
    again, so a FIFO swapped in between cannot block it either. Other failures are the OSError itself."""
    import stat

    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegular(errno.EINVAL, f"{kind_of(mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegular(errno.EINVAL, f"{kind_of(mode)}, not a regular file")
    return fd


def read_regular(path: str | os.PathLike, cap: int) -> bytes:
    """At most ``cap`` + 1 bytes of a regular file (open_regular): the caller tells more than ``cap`` apart."""
    with os.fdopen(open_regular(path), "rb") as fh:
        return fh.read(cap + 1)


def read_bounded(path: str | os.PathLike, cap: int) -> bytes:
    """The file's bytes; more than ``cap`` is an error found after reading cap + 1 bytes, never more. Only a
    regular file (open_regular): a FIFO would block the open, a device (/dev/zero) never ends."""
    path = Path(path)
    try:
        raw = read_regular(path, cap)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(raw) > cap:
        raise UsageError(f"{path}: larger than {human_bytes(cap)}, the most ddpdoctor reads from one file")
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


def json_values(text: str) -> int:
    """An upper bound of the values a JSON text holds (strings' commas and colons counted too)."""
    return text.count(",") + text.count(":") + text.count("[") + text.count("{")


def parse_json(text: str, name: str, max_depth: int = MAX_DEPTH, max_values: int = MAX_JSON_VALUES) -> Any:
    """json.loads with its recursion and its size bounded: too deep or too many values is a usage error
    found before anything is built, not a RecursionError or gigabytes of lists."""
    if json_values(text) > max_values:
        raise UsageError(f"{name}: more than {max_values} JSON values, far more than any ddpdoctor result file")
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


def load_json_file(path: str | os.PathLike, cap: int = MAX_RESULT_BYTES, max_depth: int = MAX_DEPTH,
                   budget: Budget | None = None) -> Any:
    """A JSON file under the whole policy: size cap, encoding, depth, values; with a ``budget``, also the
    command's total over all its files."""
    name = str(path)
    if budget is None:
        return parse_json(decode_utf8(read_bounded(path, cap), name), name, max_depth)
    budget.take_file(name)
    if budget.nbytes <= 0:
        raise UsageError(f"{name}: the inputs together exceed {human_bytes(MAX_TOTAL_BYTES)}; merge fewer at a time")
    raw = read_bounded(path, min(cap, budget.nbytes))
    budget.nbytes -= len(raw)
    text = decode_utf8(raw, name)
    values = json_values(text)
    if values > budget.values:
        raise UsageError(f"{name}: the inputs together hold more than {MAX_JSON_VALUES} JSON values; merge fewer "
                         "at a time")
    budget.values -= values
    return parse_json(text, name, max_depth)


def check_run_id(value: str, flag: str = "--rdzv-id") -> str:
    """The one rule for run and rendezvous ids, for every flag that takes one: a usage error otherwise."""
    if not RUN_ID.match(value or ""):
        raise UsageError(f"{flag} {value!r}: expected 1-64 characters of A-Z a-z 0-9 . _ - (starting with a "
                         "letter or digit)")
    return value
