"""Where a file named by the user is written: never by replacing what is not a regular file (as root, `report -o
/dev/full` left an HTML file where the device was: the temp-file-and-rename write renamed over it), and through
a link to the file it points to (the link stays)."""
from __future__ import annotations

import os
import stat

import pytest

from ddpdoctor import documents
from ddpdoctor.errors import UsageError
from tests import report_fixtures as fx
from tests.unit.helpers import run_cli


@pytest.fixture
def doc_file(tmp_path):
    path = tmp_path / "cluster.json"
    documents.dump(fx.preflight(2, evil=False), path)
    return path


def test_report_to_a_fifo_is_one_line_exit_2_and_the_fifo_stays(tmp_path, doc_file):
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    p = run_cli("report", str(doc_file), "-o", str(fifo))
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not a regular file" in lines[0], p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_report_through_a_link_writes_the_file_it_points_to(tmp_path, doc_file):
    real, link = tmp_path / "real.html", tmp_path / "link.html"
    real.write_text("old")
    link.symlink_to(real)
    assert run_cli("report", str(doc_file), "-o", str(link)).returncode == 0
    assert link.is_symlink() and real.read_text().startswith("<!DOCTYPE html>")


def test_write_atomic_never_renames_over_a_non_regular_file(tmp_path):
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        documents.write_atomic(fifo, "{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(os.listdir(tmp_path)) == ["x.json"]
