"""Fixtures the unit tests share: a tiny full filesystem for the full-disk tests."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def _run(*argv, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, **kw)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs, filled to the last byte; unmounted when the test ends. Needs root."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)).returncode != 0:
        pytest.skip("needs root to mount a tmpfs")
    try:
        with open(mnt / "filler", "wb", buffering=0) as fh:  # unbuffered: the close has nothing left to fail on
            try:
                while True:
                    fh.write(b"\0" * 1024)
            except OSError:
                pass
        yield mnt
    finally:
        _run("umount", "-l", str(mnt))


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if p.name.endswith(".tmp"))

