"""`ddpdoctor checks`: every registered check, where it comes from and what it verifies."""
from __future__ import annotations

import click

from ..exitcodes import ExitCode
from . import common


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def checks(as_json: bool) -> int:
    """List every check (built-in and plugin): name, phase, source, what it verifies, its options.

    \b
    Examples:
      ddpdoctor checks            # one line per check
      ddpdoctor checks -v         # with every option, its default and what it means
      ddpdoctor checks --json
    """
    from ..registry import discover

    loaded = discover()
    if as_json:
        common.print_json([lc.describe() for lc in loaded])
        return ExitCode.OK
    from rich.table import Table
    from rich.text import Text

    table = Table(header_style="bold", box=None)
    for col in ("name", "phase", "from", "verifies"):
        table.add_column(col, no_wrap=col != "verifies")
    for lc in loaded:
        table.add_row(Text(lc.name, style="bold"), Text(lc.check.phase), Text(lc.source), Text(lc.check.description))
        if common.STATE.verbose:
            for key, opt in lc.check.options.items():
                table.add_row("", "", "", Text(f"  --set {lc.name}.{key}={_as_typed(opt.default)}  {opt.help}", style="dim"))
    common.console().print(table)
    if not common.STATE.verbose:
        print("options: ddpdoctor checks -v", flush=True)
    return ExitCode.OK


def _as_typed(value) -> str:
    """A default as --set and ddpdoctor.toml take it: true/false, not Python's True/False."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
