"""A full disk under --output/--report: the verdict still printed, one error line naming the path, no temp file
left, the verdict's exit code unchanged (issue 33: a FAIL's 1 had become 2). The commands run in-process; the tiny
filesystem is a real tmpfs; ENOSPC is also simulated at os.write where no tmpfs can be mounted."""
from __future__ import annotations

import json

import pytest

from ddpdoctor.cli import common
from tests.unit.conftest import leftovers
from tests.unit.helpers import run_cli as cli


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
    assert p.returncode in (0, 1), p.stderr  # the verdict's own code
    assert "packages" in p.stdout and "resources" in p.stdout  # the verdict table was printed first
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert str(tiny_fs / "out") in lines[0] and str(tiny_fs / "report.html") in lines[0]
    assert "No space left on device" in lines[0] and "free in" in lines[0]
    assert leftovers(tiny_fs) == []


@pytest.mark.timeout(180)
def test_preflight_json_still_reaches_stdout_on_a_full_disk(tiny_fs):
    p = cli("preflight", "--only", "resources,packages", "--json", "--output", str(tiny_fs / "out"))
    doc = json.loads(p.stdout)
    assert doc["kind"] == "preflight" and p.returncode == doc["exit_code"], p.stderr
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


def test_a_write_that_fails_never_changes_a_fails_exit_code(tmp_path, monkeypatch, capsys):
    """ENOSPC simulated where the file is put in place: exit 1 stays 1, one error line, no temp file."""
    import errno

    from ddpdoctor import documents

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(documents.os, "replace", full)
    doc = {"exit_code": 1, "verdict": "fail"}
    code = common.emit(doc, filename="d.json", out_dir=tmp_path, report_file=None, as_json=True,
                       render=lambda *_: None, unwritten=["run.json: cannot write (No space left on device)"])
    assert code == 1
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "d.json" in lines[0] and "run.json" in lines[0], lines
    assert leftovers(tmp_path) == []


@pytest.mark.timeout(180)
def test_postmortem_fail_on_a_full_disk_stays_exit_1(tmp_path, tiny_fs):
    from tests.unit.cli.test_hostile_inputs import crafted_log_dir

    logs, agent = crafted_log_dir(tmp_path)
    p = cli("postmortem", str(logs), "--agent-log", str(agent), "--output", str(tiny_fs / "out"),
            "--report", str(tiny_fs / "r.html"))
    assert p.returncode == 1, p.stderr[-2000:]
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "No space left" in lines[0] and str(tiny_fs / "r.html") in lines[0], p.stderr
    assert leftovers(tiny_fs) == []
