"""`ddpdoctor postmortem` on a path that is no torchrun log dir: one line and exit 2 (in-process; moved from the
integration tests, where each case cost an interpreter's start-up)."""
from __future__ import annotations

from tests.unit.helpers import run_cli


def test_unreadable_or_wrong_dir_is_one_line_exit_2(tmp_path):
    for args, needle in (([str(tmp_path / "nope")], "not a directory"), ([str(tmp_path)], "no torchrun log dir"),
                         ([str(tmp_path), "--agent-log", str(tmp_path / "x")], "")):
        p = run_cli("postmortem", *args)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr


def test_a_missing_fr_dir_is_one_line_exit_2(tmp_path):
    """A mistyped --fr-dir used to be ignored: the verdict then lacked the dumps the user pointed at."""
    logs = tmp_path / "logs"
    (logs / "job_abc" / "attempt_0" / "0").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    for target, needle in ((tmp_path / "nope", f"--fr-dir {tmp_path / 'nope'}: no such directory"),
                           (tmp_path / "file", "'--fr-dir'")):
        p = run_cli("postmortem", str(logs), "--fr-dir", str(target))
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert run_cli("postmortem", str(logs), "--fr-dir", str(tmp_path)).returncode in (0, 1)
