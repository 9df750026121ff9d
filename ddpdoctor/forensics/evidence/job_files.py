"""Reading a job's records for the post-mortem: every read capped, regular files only, nothing outside the log dir.

The post-mortem reads files a crashed job, another node or a user left: torchrun's log dir, error files,
stderr logs, flight-recorder dumps. Any of them can be huge, a FIFO, a device, a link elsewhere, or crafted.
Every read here is bounded (see the caps below and FORENSICS.md, "Input bounds"); a file that is not a
regular file, is a link leaving the log dir, or has the wrong shape is skipped with a note, never an exception
and never a wait: the open is O_NONBLOCK after an lstat, and fstat confirms a regular file before any read.
Notes go to the collector of ``reading(root)``; the document shows them as ``input_notes``.

The parsers here are linear: no regex with nested or adjacent unbounded quantifiers over the same
characters (a 10 MB line costs well under a second).
"""
from __future__ import annotations

import contextlib
import contextvars
import io
import json
import os
import pickle
import re
import stat
import struct
from pathlib import Path
from typing import Any, Iterator

from ... import inputs
from ...numbers import parse_int

# ---------------------------------------------------------------- the caps (FORENSICS.md, "Input bounds")
ERROR_FILE_BYTES = 4 << 20  # an error.json (message + traceback) is a few KiB; larger is skipped
STDERR_TAIL_BYTES = 512 << 10  # of a rank's stderr.log only its last 512 KiB are read (seek, not read-all)
AGENT_LOG_BYTES = 4 << 20  # of torchrun's own stderr, the last 4 MiB (its failure table is at the end)
MESSAGE_CHARS = 64 << 10  # an exception message kept in the document
TRACEBACK_CHARS = 256 << 10  # a traceback kept in the document
JSON_CONTAINERS = 1 << 20  # `[`/`{` in one JSON input before it is refused unparsed (json.loads would build them)
DIR_ENTRIES = 4096  # entries looked at in one directory (ranks, attempts, runs, nodes)
MAX_NOTES = 50
# Flight-recorder dumps (fr_dumps.py): at most DUMP_BYTES read; a pickle runs at most PICKLE_OPS opcodes (each
# makes at most one object), and what it built is walked as a tree (memo references counted every time
# they are used, cycles included) for at most TREE_NODES nodes and TREE_DEPTH levels before it is used.
# Memory stays under ~DUMP_BYTES x 3 + PICKLE_OPS x ~200 B: about 0.4 GiB for the worst file, whatever the
# pickle's memo references (a 16 KB memo bomb expanding to 2.9 GB is refused after TREE_NODES visits).
DUMP_BYTES = 64 << 20
PICKLE_OPS = 1_000_000
TREE_NODES = 2_000_000
TREE_DEPTH = 64

_notes: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("ddpdoctor_input_notes", default=None)
_roots: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar("ddpdoctor_input_roots",
                                                                                 default=None)


@contextlib.contextmanager
def reading(root: Path | list[Path] | None) -> Iterator[list[str]]:
    """Reads inside this block stay under ``root`` (one directory or several: links and named paths leaving
    them are skipped) and their notes are collected in the list it yields."""
    notes: list[str] = []
    roots = None if root is None else tuple(os.path.realpath(r) for r in (root if isinstance(root, list) else [root]))
    t1, t2 = _notes.set(notes), _roots.set(roots)
    try:
        yield notes
    finally:
        _notes.reset(t1)
        _roots.reset(t2)


def note(message: str) -> None:
    notes = _notes.get()
    if notes is not None and len(notes) < MAX_NOTES and message not in notes:
        notes.append(message)


def _inside(path: Path) -> bool:
    roots = _roots.get()
    if roots is None:
        return True
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots)


def open_regular(path: Path) -> int | None:
    """A file descriptor of a regular file under the reading root, or None (with a note when it exists but is
    skipped). Never blocks: a FIFO is found by lstat/stat first, and the open itself is O_NONBLOCK."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return None  # absent: nothing to say
    if not _inside(path):
        note(f"skipped {path}: {'a link that leads' if stat.S_ISLNK(st.st_mode) else 'it lies'} outside the log dir")
        return None
    if stat.S_ISLNK(st.st_mode) and not os.path.exists(path):
        note(f"skipped {path}: a dangling link")
        return None
    try:
        return inputs.open_regular(path)  # the one opener: a FIFO or device refused before open()
    except inputs.NotRegular as exc:
        note(f"skipped {path}: {exc.strerror}")
    except OSError as exc:
        note(f"skipped {path}: cannot read ({exc.strerror or exc})")
    return None


def read_capped(path: Path, cap: int) -> bytes | None:
    """The whole file if it holds at most ``cap`` bytes; else None with a note."""
    fd = open_regular(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        note(f"skipped {path}: larger than {cap >> 10} KiB, the most read from such a file")
        return None
    return data


def read_text(path: Path, cap: int = DUMP_BYTES) -> str:
    """A whole text file of the run dir (metrics, records the ranks wrote), through the same refusals as every
    input: a FIFO or device a job left there is skipped with a note, never read (it would block); "" then."""
    raw = read_capped(Path(path), cap)
    return "" if raw is None else raw.decode("utf-8", errors="replace")


def read_tail(path: Path, max_bytes: int = STDERR_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a file as text (a rank's log can be gigabytes: seek, never read it all)."""
    fd = open_regular(path)
    if fd is None:
        return ""
    try:
        with os.fdopen(fd, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError as exc:
        note(f"skipped {path}: cannot read ({exc.strerror or exc})")
        return ""
    return data.decode("utf-8", errors="replace")


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters: the head and the end of a longer text, with what was cut said."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… ({len(text) - 2 * half} characters cut) …\n{text[-half:]}"


# ---------------------------------------------------------------- JSON inputs
def too_many_containers(text: str | bytes, limit: int = JSON_CONTAINERS) -> bool:
    """True when a JSON text would build more than ``limit`` lists and objects (counted by two C-speed
    substring counts before json.loads builds any: 64 MiB of `[],` is 21 million lists, ~3 GB)."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") > limit
    return text.count("[") + text.count("{") > limit


def loads_bounded(raw: bytes, name: str, containers: int = JSON_CONTAINERS) -> Any:
    """json.loads of untrusted bytes, or None with a note: undecodable, not JSON, too many containers, too deep."""
    if too_many_containers(raw, containers):
        note(f"skipped {name}: more than {containers} JSON lists/objects")
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        note(f"skipped {name}: JSON nested too deep")
    except (UnicodeDecodeError, ValueError):
        note(f"skipped {name}: not valid UTF-8 JSON")
    return None


def read_error_file(path: Path) -> dict | None:
    """torch's error file (@record): {"message": "..."} or {"message": {"message", "extraInfo": {"py_callstack",
    "timestamp"}}}. Anything else (a list, a string, a 10^6-deep nesting, a FIFO, /dev/zero) is None + a note."""
    raw = read_capped(Path(path), ERROR_FILE_BYTES)
    if raw is None:
        return None
    data = loads_bounded(raw, str(path), containers=10_000)
    if data is None:
        return None
    if not isinstance(data, dict):
        note(f"skipped {path}: an error file is a JSON object, this is a {type(data).__name__}")
        return None
    msg = data.get("message")
    if isinstance(msg, dict):
        extra = msg.get("extraInfo")
        extra = extra if isinstance(extra, dict) else {}
        return {"message": clip(_text(msg.get("message", "")), MESSAGE_CHARS),
                "traceback": clip(_text(extra.get("py_callstack", "")), TRACEBACK_CHARS),
                "timestamp": _float(extra.get("timestamp"))}
    if msg is not None and not isinstance(msg, (str, int, float)):
        note(f"{path}: \"message\" is a {type(msg).__name__}, not text")
        return {"message": "", "traceback": "", "timestamp": None}
    return {"message": clip(_text(msg or ""), MESSAGE_CHARS), "traceback": "", "timestamp": None}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if isinstance(value, (dict, list)) else str(value)


def _float(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if f == f and abs(f) != float("inf") else None


# ---------------------------------------------------------------- exception lines, linearly
_STOP_SUFFIXES = ("Error", "Exception", "Failure", "Interrupt", "Exit")


def _is_name(text: str) -> bool:
    """A (dotted) Python identifier: [A-Za-z_][\\w.]* without a regex."""
    return bool(text) and (text[0] == "_" or (text[0].isascii() and text[0].isalpha())) and \
        text.replace(".", "_").replace("_", "a").isalnum()


def exception_line(message: str, tb: str) -> tuple[str | None, str | None]:
    """('ValueError', 'bad shape') from an error file's message or a traceback's last line.

    The same answer as the pattern ``^([A-Za-z_][\\w.]*(?:Error|...|[A-Z]\\w*)):\\s*(.*)$`` (a dotted name whose
    last part has a capital after its first character, then a colon), found with string operations: that
    pattern took 79 s on one 100,000-character word, this takes microseconds."""
    text = (message or "").strip()
    if not text:
        stripped = (tb or "").strip()
        text = stripped.splitlines()[-1] if stripped else ""
    first = text.split("\n", 1)[0]
    first = first.splitlines()[0] if first else ""  # \r, \x0b, ... end a line too, as splitlines() says
    head, colon, rest = first.partition(":")
    if colon and _is_name(head) and _capital_after_start(head):
        return head.rsplit(".", 1)[-1], rest.lstrip()
    bare = first.strip()
    if _is_name(bare) and any(bare.endswith(s) and len(bare) > len(s) for s in _STOP_SUFFIXES):
        return bare.rsplit(".", 1)[-1], ""  # `KeyboardInterrupt`: an exception without a message
    return None, first or None


def _capital_after_start(name: str) -> bool:
    """Some capital letter at index >= 1 with no dot after it (the pattern's `[A-Z]\\w*` at the end)."""
    last_dot = name.rfind(".")
    tail_start = max(1, last_dot + 1)
    return any("A" <= c <= "Z" for c in name[tail_start:])


# ---------------------------------------------------------------- directories
def subdirs(parent: Path, limit: int = DIR_ENTRIES) -> list[Path]:
    """The directories in ``parent`` (links to directories only when they stay under the root), at most
    ``limit`` entries looked at."""
    out = []
    try:
        with os.scandir(parent) as it:
            for i, entry in enumerate(it):
                if i >= limit:
                    note(f"{parent}: more than {limit} entries; the rest not read")
                    break
                try:
                    if entry.is_dir(follow_symlinks=False) or (entry.is_symlink() and entry.is_dir() and _inside(Path(entry.path))):
                        if not os.access(entry.path, os.R_OK | os.X_OK):  # mode 000, not root: a note, not exit 4
                            note(f"skipped {entry.path}: permission denied")
                            continue
                        out.append(Path(entry.path))
                except OSError:
                    continue
    except OSError as exc:
        note(f"skipped {parent}: cannot list ({exc.strerror or exc})")
        return []
    return out


def numbered(dirs: list[Path], prefix: str = "") -> list[tuple[int, Path]]:
    """(number, dir) for dirs named PREFIX<number> (`attempt_0`, `3`); others (`attempt_final`, `x`) get a note."""
    out = []
    for d in dirs:
        tail = d.name[len(prefix):] if d.name.startswith(prefix) else None
        if tail is not None and parse_int(tail, hi=999_999_999, strip=False) is not None:
            out.append((int(tail), d))
        else:
            note(f"skipped {d}: not a torchrun {prefix + '<number>' if prefix else '<local rank>'} folder")
    return sorted(out, key=lambda x: x[0])


def mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# ---------------------------------------------------------------- flight-recorder pickles
class _Refused(pickle.UnpicklingError):
    pass


def _counting(handler):
    def op(self):
        self._ops_left -= 1
        if self._ops_left < 0:
            raise _Refused(f"more than {PICKLE_OPS} pickle operations")
        return handler(self)
    return op


def _load_bytearray8(self):
    """BYTEARRAY8 as the Python unpickler has it allocates the announced length first (bytearray(2**40)):
    read what is there and refuse a length the input does not hold."""
    (length,) = struct.unpack("<Q", self.read(8))
    data = self.read(length)
    if len(data) < length:
        raise _Refused(f"BYTEARRAY8 announces {length} bytes, the input holds {len(data)}")
    self.append(bytearray(data))


class PlainUnpickler(pickle._Unpickler):  # noqa: SLF001 - the Python unpickler: its dispatch can be bounded
    """Dicts, lists, tuples, strings, numbers, bools and None only (any class lookup is refused), at most
    PICKLE_OPS operations. The Python implementation, not the C one: the C unpickler allocates what a length
    field announces (a 13-byte pickle announcing 2^62 bytes is a MemoryError), this one reads what is there."""

    dispatch = {key: _counting(_load_bytearray8 if key == pickle.BYTEARRAY8[0] else handler)
                for key, handler in pickle._Unpickler.dispatch.items()}  # noqa: SLF001

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self._ops_left = PICKLE_OPS

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}: only plain data is read")


def load_plain_pickle(raw: bytes, name: str) -> Any:
    try:
        return PlainUnpickler(raw).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            RecursionError, OverflowError, MemoryError, UnicodeDecodeError, struct.error) as exc:
        note(f"skipped {name}: not a plain-data pickle ({type(exc).__name__}: {str(exc)[:120]})")
        return None


def tree_fits(obj: Any, name: str, nodes: int = TREE_NODES, depth: int = TREE_DEPTH) -> bool:
    """Walk what was loaded as the tree every later reader sees (a memo reference counted each time it is
    used): more than ``nodes`` nodes, ``depth`` levels or a cycle is refused with a note, at the cost of at
    most ``nodes`` steps."""
    stack = [(obj, 1)]
    seen = 0
    while stack:
        value, level = stack.pop()
        seen += 1
        if seen > nodes:
            note(f"skipped {name}: expands to more than {nodes} values (shared or cyclic references)")
            return False
        if isinstance(value, dict):
            children = list(value.keys()) + list(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = list(value)
        else:
            continue
        if level >= depth and children:
            note(f"skipped {name}: nested deeper than {depth} levels")
            return False
        if len(children) > nodes:
            note(f"skipped {name}: expands to more than {nodes} values")
            return False
        stack.extend((c, level + 1) for c in children)
    return True


def global_rank_of(rank_dir: Path) -> int | None:
    """torch prefixes a worker's traceback lines with its global rank: `[rank5]: ...`."""
    m = re.search(r"^\[rank(\d{1,9})\]:", read_tail(rank_dir / "stderr.log"), re.M)
    return int(m.group(1)) if m else None
