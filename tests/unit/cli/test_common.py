"""Unit tests of ddpdoctor/cli/common.py."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from ddpdoctor.cli.common import TIMEOUT, FiniteFloat


@pytest.mark.parametrize("value, ok", [("5", True), ("1", True), ("604800", True), ("nan", False), ("inf", False),
                                       ("-inf", False), ("0.5", False), ("1e300", False), ("soon", False)])
def test_timeout_type(value, ok):
    @click.command()
    @click.option("--timeout", type=TIMEOUT)
    def cmd(timeout):
        click.echo(repr(timeout))

    result = CliRunner().invoke(cmd, ["--timeout", value])
    assert (result.exit_code == 0) is ok, result.output


def test_finite_float_without_bounds():
    assert FiniteFloat().convert("-1e9", None, None) == -1e9
    with pytest.raises(click.BadParameter):
        FiniteFloat().convert("nan", None, None)
