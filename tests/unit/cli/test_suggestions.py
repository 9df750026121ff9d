"""'Did you mean' ranked by similarity: the closest option first (click lists them alphabetically)."""
from __future__ import annotations

from ddpdoctor.cli import run


def test_the_closest_option_is_suggested_first(capsys):
    assert run(["preflight", "--nnode", "2"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean '--nnodes'?" in err and err.index("--nnodes") < err.index("--node-rank"), err
    assert "Traceback" not in err


def test_one_close_option_is_named_alone(capsys):
    assert run(["nccl-bench", "--nproc-per-nod", "2"]) == 2
    assert "Did you mean '--nproc-per-node'?" in capsys.readouterr().err


def test_a_mistyped_command_names_the_closest_commands(capsys):
    assert run(["reprot"]) == 2
    err = capsys.readouterr().err
    assert "No such command 'reprot'. Did you mean 'report'?" in err and "Traceback" not in err
    assert run(["check"]) == 2
    assert "Did you mean 'checks'?" in capsys.readouterr().err
    assert run(["nccl-bnech"]) == 2
    assert "Did you mean 'nccl-bench'?" in capsys.readouterr().err


def test_a_command_like_nothing_known_gets_clicks_plain_error(capsys):
    assert run(["zzz"]) == 2
    err = capsys.readouterr().err
    assert "No such command 'zzz'" in err and "Did you mean" not in err
