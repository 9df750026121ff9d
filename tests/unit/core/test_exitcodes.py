"""ddpdoctor/exitcodes.py: one IntEnum for every exit code, the one the errors, documents and the CLI use."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import click

from ddpdoctor import documents, errors
from ddpdoctor.api import Level, Result
from ddpdoctor.cli import Context, cli, run
from ddpdoctor.exitcodes import ExitCode

PACKAGE = Path(documents.__file__).parent


def test_values_are_the_documented_table():
    assert [(m.name, int(m)) for m in ExitCode] == [("OK", 0), ("FAIL", 1), ("USAGE", 2), ("NOT_ASSEMBLED", 3),
                                                   ("INTERNAL", 4), ("NOT_VERIFIED", 5), ("INTERRUPTED", 130), ("TERMINATED", 143)]


def test_root_help_lists_every_code_the_commands_end_with():
    text = " ".join(cli.get_help(Context(cli, info_name="ddpdoctor")).split())
    for code, words in ((ExitCode.OK, "passed"), (ExitCode.FAIL, "a check failed"), (ExitCode.USAGE, "usage"),
                        (ExitCode.NOT_ASSEMBLED, "the cluster did not assemble"),
                        (ExitCode.INTERNAL, "internal error"), (ExitCode.NOT_VERIFIED, "not verified")):
        assert f"{code} {words}" in text, (code, text)


def test_a_code_reads_as_its_number_in_text_and_json():
    assert str(ExitCode.FAIL) == "1" and f"{ExitCode.USAGE}" == "2"
    assert json.loads(json.dumps({"exit_code": ExitCode.INTERNAL})) == {"exit_code": 4}


def test_errors_documents_and_the_cli_use_the_enum(capsys):
    assert errors.UsageError.exit_code is ExitCode.USAGE
    assert errors.ClusterNotAssembled.exit_code is ExitCode.NOT_ASSEMBLED
    assert errors.DdpdoctorError.exit_code is ExitCode.INTERNAL
    assert documents.exit_code_of(documents.verdict_of([Result("a", Level.FAIL, "f")])) is ExitCode.FAIL
    assert documents.exit_code_of(documents.verdict_of([Result("a", Level.WARN, "w")])) is ExitCode.OK
    assert run(["preflight", "--no-such-flag"]) is ExitCode.USAGE
    capsys.readouterr()


def test_no_second_definition_of_an_exit_code_in_the_package():
    """An EXIT_* constant or an `exit_code = <number>` class attribute anywhere but exitcodes.py is a second table."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "exitcodes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                literal = isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)
                if any(n.startswith("EXIT_") for n in names) or ("exit_code" in names and literal):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found


def test_click_usage_errors_end_with_the_usage_code(capsys):
    assert run(["nosuchcommand"]) == ExitCode.USAGE == click.UsageError.exit_code
    capsys.readouterr()
