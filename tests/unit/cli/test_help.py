"""Help that follows click's and torchrun's conventions: every command documented, described and pasteable."""
from __future__ import annotations

import re

import click
import pytest

from ddpdoctor.cli import COMMANDS, cli, run
from tests.unit.helpers import run_cli

COMMAND_NAMES = sorted(COMMANDS)


def help_of(name: str, width: int = 80) -> str:
    cmd = cli.get_command(click.Context(cli), name)
    with cmd.context_class(cmd, info_name=name, terminal_width=width, max_content_width=width) as ctx:
        return cmd.get_help(ctx)  # the command's own context class: its help formatter, as `--help` uses


def test_ddpdoctor_alone_prints_help_and_exits_0():
    out = run_cli()
    assert out.returncode == 0 and "Usage: ddpdoctor" in out.stdout and not out.stderr


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_every_option_is_described(name):
    cmd = cli.get_command(click.Context(cli), name)
    bare = [p.opts[0] for p in cmd.params if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert not bare, f"{name}: options without a description: {bare}"


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_every_command_has_an_example_block(name):
    text = help_of(name)
    assert "Examples:" in text and f"ddpdoctor {name}" in text.split("Examples:", 1)[1]


@pytest.mark.parametrize("name", COMMAND_NAMES)
@pytest.mark.parametrize("width", [60, 80, 100])
def test_help_never_splits_a_token(name, width):
    for line in help_of(name, width).splitlines():
        stripped = line.rstrip()
        assert not re.search(r"[A-Za-z0-9]-$", stripped), f"{name} at {width}: a word broken at a hyphen: {line!r}"
        assert not re.search(r"(^|\s)(--skip|--only|--set)$", stripped), f"{name}: a flag split from its value: {line!r}"
        assert stripped.count("`") % 2 == 0, f"{name} at {width}: a quoted command broken: {line!r}"


def test_global_flags_work_after_the_subcommand(capsys):
    assert run(["checks", "-v"]) == 0
    assert "--set clock-skew.warn_ms=" in capsys.readouterr().out


def test_a_script_option_without_dashes_gets_the_hint(capsys):
    assert run(["run-trainer", "train.py", "--lr", "3"]) == 2
    err = capsys.readouterr().err
    assert "--lr" in err and "after `--`" in err


def test_one_name_for_one_idea_nproc_per_node_everywhere():
    for name in ("nccl-bench", "run-trainer", "preflight"):
        assert "--nproc-per-node" in help_of(name), name
