"""Whether torch's shared libraries are whole, read before anything imports torch: an ELF file shorter than its own
header says (truncated in place: a full disk during pip install, a copy cut short) is mapped by the loader as it
claims to be, and the process that imports it dies of SIGBUS (measured: libtorch_cpu.so cut to 64 KiB, 4 MiB or
200 MB), with no Python error to report; only a file shorter than its ELF header raises ImportError ("file too
short"). Reads 64 bytes a file and imports nothing."""
from __future__ import annotations

import os
import struct
import sys

ELF_MAGIC = b"\x7fELF"
HEADER_BYTES = 64  # an ELF64 header; an ELF32 one is 52


def expected_size(header: bytes) -> int | None:
    """The least size of an ELF file whose header is ``header``: the end of its section header table (the last
    thing a linker writes); None when the header is not one we can read (not ELF, no section table)."""
    if len(header) < 52 or header[:4] != ELF_MAGIC or header[4] not in (1, 2) or header[5] not in (1, 2):
        return None
    endian = "<" if header[5] == 1 else ">"
    if header[4] == 2:  # ELF64
        if len(header) < HEADER_BYTES:
            return None
        (shoff,) = struct.unpack_from(endian + "Q", header, 0x28)
        shentsize, shnum = struct.unpack_from(endian + "HH", header, 0x3A)
    else:
        (shoff,) = struct.unpack_from(endian + "I", header, 0x20)
        shentsize, shnum = struct.unpack_from(endian + "HH", header, 0x2E)
    if not shoff or not shnum:
        return None
    return shoff + shentsize * shnum


def truncated(folder: str) -> list[str]:
    """One line per shared library in ``folder`` (torch/lib) that is shorter than its ELF header says, or too short
    to hold the header: what importing it would die of. Each line starts with the library's name and ends with its
    path, so that a line cut short (a drain reason holds a few hundred characters, a venv's path can be long) still
    names what broke. Unreadable entries are not judged (the import says)."""
    out = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if ".so" not in e.name:
            continue
        try:
            with open(e.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                header = f.read(HEADER_BYTES)
        except OSError:
            continue
        if size < 52:
            out.append(f"{e.name} is truncated: {size} bytes, too short for an ELF header ({e.path})")
            continue
        want = expected_size(header)
        if want is not None and size < want:
            out.append(f"{e.name} is truncated: {size:,} of the {want:,} bytes its ELF header says ({e.path})")
    return out


# Imports this process refused, and why (refuse): sys.modules holds None for each, so a later `import` raises
# ImportError instead of loading the damaged library; what a check then reports reads the reason here
REFUSED: dict[str, str] = {}


def package_damage(name: str) -> str | None:
    """Why importing package ``name`` would crash this process (a truncated shared library in its folder or its
    lib/ folder, as torch's), else None; None too when it is imported already or not installed."""
    if name in REFUSED:
        return REFUSED[name]
    if name in sys.modules:
        return None
    from importlib.util import find_spec

    try:
        spec = find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith("__init__.py"):
        return None
    folder = os.path.dirname(origin)
    found = truncated(folder) + truncated(os.path.join(folder, "lib"))
    if not found:
        return None
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return found[0] + more


def refuse(name: str, why: str) -> None:
    """Never import ``name`` in this process (its library would kill it): `import name` raises ImportError."""
    REFUSED[name] = why
    sys.modules[name] = None  # type: ignore[assignment]


def import_error_words(name: str, exc: BaseException) -> str:
    """Why ``import name`` failed, as a check says it: a refused import says the damage found (``refuse``'s
    ImportError only says "halted; None in sys.modules"), any other the exception as raised."""
    if name in REFUSED:
        return f"{REFUSED[name]}; not imported"
    return f"{type(exc).__name__}: {exc}"


def torch_damage() -> str | None:
    """Why `import torch` would crash this process (a truncated library of torch's), else None."""
    return package_damage("torch")
