"""The root group loads each command's module on demand; one that cannot be loaded is a bug, said loudly."""
from __future__ import annotations

import pytest

import ddpdoctor.cli as root
from ddpdoctor.exitcodes import ExitCode
from tests.unit.helpers import run_cli


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("target, error", [
    ("ddpdoctor.cli.no_such_module:ghost", "ModuleNotFoundError"),     # the module is gone from the install
    ("ddpdoctor.cli.checks_cmd:no_such_attribute", "AttributeError"),  # the module lost its command
])
def test_a_built_in_command_that_cannot_load_is_exit_4_with_one_line(monkeypatch, target, error):
    monkeypatch.setitem(root.COMMANDS, "ghost", target)
    for argv in (["ghost"], ["ghost", "--help"], ["--help"]):  # the root's help lists every command: loud too
        res = run_cli(*argv)
        assert res.returncode == ExitCode.INTERNAL, (argv, res.stderr)
        line = one_line(res.stderr)
        assert "'ghost'" in line and target.split(":")[0] in line and error in line, line
        assert "reinstall ddpdoctor" in line


def test_an_import_error_inside_a_command_module_is_loud_too(monkeypatch, tmp_path):
    """A dependency the module needs is missing: its ImportError names it instead of hiding the command."""
    pkg = tmp_path / "broken_cmd.py"
    pkg.write_text("import no_such_dependency_h7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(root.COMMANDS, "broken", "broken_cmd:cmd")
    res = run_cli("broken")
    assert res.returncode == ExitCode.INTERNAL
    assert "no_such_dependency_h7" in one_line(res.stderr)


def test_verbose_adds_the_traceback(monkeypatch):
    monkeypatch.setitem(root.COMMANDS, "ghost", "ddpdoctor.cli.no_such_module:ghost")
    res = run_cli("-v", "ghost")
    assert res.returncode == ExitCode.INTERNAL and "Traceback" in res.stderr


def test_every_listed_command_loads():
    res = run_cli("--help")
    assert res.returncode == 0, res.stderr
    for name in root.COMMANDS:
        assert name in res.stdout


def test_each_run_starts_from_the_defaults(monkeypatch, tmp_path):
    """An earlier run's -v in the same process (one test after another on a worker) does not carry over: the
    module that cannot load is looked up before the root resets -v, and its traceback showed without -v."""
    from ddpdoctor.cli import common

    monkeypatch.setattr(common.STATE, "verbose", 1)
    test_an_import_error_inside_a_command_module_is_loud_too(monkeypatch, tmp_path)
