"""Unit tests of ddpdoctor/shared_libs.py: a truncated ELF file is found from its header, before any import."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from ddpdoctor import shared_libs


def elf64(shoff: int, shentsize: int = 64, shnum: int = 10) -> bytes:
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HH", header, 0x3A, shentsize, shnum)
    return bytes(header)


def test_the_least_size_is_the_end_of_the_section_table():
    assert shared_libs.expected_size(elf64(1000)) == 1000 + 64 * 10
    assert shared_libs.expected_size(b"not an elf file" + bytes(60)) is None
    assert shared_libs.expected_size(elf64(0)) is None  # no section table: nothing to say


def test_a_library_shorter_than_its_header_says_is_named(tmp_path):
    whole = elf64(1000)
    (tmp_path / "libwhole.so").write_bytes(whole + bytes(1000 + 640 - len(whole)))
    (tmp_path / "libcut.so.1").write_bytes(whole + bytes(100))
    (tmp_path / "libempty.so").write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")  # not a library
    (tmp_path / "libtext.so").write_bytes(b"INPUT(-lfoo)\n" * 10)  # a linker script: not judged
    found = shared_libs.truncated(str(tmp_path))
    assert found == [f"libcut.so.1 is truncated: 164 of the 1,640 bytes its ELF header says ({tmp_path}/libcut.so.1)",
                     f"libempty.so is truncated: 0 bytes, too short for an ELF header ({tmp_path}/libempty.so)"], found


def test_this_torch_is_whole_and_a_real_library_cut_in_half_is_not(truncated_torch):
    import torch

    assert shared_libs.truncated(str(Path(torch.__file__).parent / "lib")) == []
    assert shared_libs.torch_damage() is None
    (line,) = shared_libs.truncated(f"{truncated_torch}/torch/lib")
    assert "libtruncated.so is truncated: " in line, line



def test_a_refused_import_is_said_with_the_damage_found_not_as_halted(monkeypatch):
    """The checks beside torch-build (nccl-runtime, gpu, gpu-perf) skip a damaged torch saying which library,
    not Python's "import of torch halted; None in sys.modules"."""
    from ddpdoctor import shared_libs

    monkeypatch.setitem(shared_libs.REFUSED, "fakepkg", "libfake.so is truncated: 10 of the 20 bytes")
    monkeypatch.setitem(sys.modules, "fakepkg", None)
    with pytest.raises(ImportError) as raised:
        import fakepkg  # noqa: F401
    said = shared_libs.import_error_words("fakepkg", raised.value)
    assert said == "libfake.so is truncated: 10 of the 20 bytes; not imported" and "halted" not in said
    assert shared_libs.import_error_words("other", ValueError("bad")) == "ValueError: bad"
