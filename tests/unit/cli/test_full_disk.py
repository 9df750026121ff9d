"""Unit tests of ddpdoctor/cli/full_disk.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.cli import common


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


def cli(*args, timeout=120):
    return _run(sys.executable, "-m", "ddpdoctor", *args, timeout=timeout)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error: ")]


def test_emit_writes_files_even_when_rendering_fails(tmp_path):
    doc = {"exit_code": 0, "verdict": "pass"}

    def broken(_doc, _console):
        raise RuntimeError("render bug")

    with pytest.raises(RuntimeError):
        common.emit(doc, filename="d.json", out_dir=tmp_path, report_file=None, as_json=False, render=broken)
    assert json.loads((tmp_path / "d.json").read_text()) == doc


@pytest.mark.timeout(180)
def test_preflight_output_and_report_on_a_full_disk(tiny_fs):
    p = cli("preflight", "--only", "resources,packages", "--output", str(tiny_fs / "out"),
            "--report", str(tiny_fs / "report.html"))
    assert p.returncode == 2, p.stderr
    assert "packages" in p.stdout and "resources" in p.stdout  # the verdict table was printed first
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert str(tiny_fs / "out") in lines[0] and str(tiny_fs / "report.html") in lines[0]
    assert "No space left on device" in lines[0] and "free in" in lines[0]
    assert leftovers(tiny_fs) == []


@pytest.mark.timeout(180)
def test_preflight_json_still_reaches_stdout_on_a_full_disk(tiny_fs):
    p = cli("preflight", "--only", "resources,packages", "--json", "--output", str(tiny_fs / "out"))
    assert p.returncode == 2, p.stderr
    assert json.loads(p.stdout)["kind"] == "preflight"
    assert len(error_lines(p.stderr)) == 1 and "free in" in p.stderr
    assert leftovers(tiny_fs) == []


@pytest.mark.timeout(180)
def test_report_output_on_a_full_disk(tmp_path, tiny_fs):
    p = cli("preflight", "--only", "resources", "--output", str(tmp_path))
    assert p.returncode in (0, 1), p.stderr
    src = next(tmp_path.glob("node-*.json"))
    target = tiny_fs / "report.html"
    p = cli("report", str(src), "-o", str(target))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and str(target) in lines[0] and "free in" in lines[0]
    assert not target.exists() and leftovers(tiny_fs) == []
