"""`ddpdoctor checks`: every registered check, where it comes from and what it verifies."""
from __future__ import annotations

import click

from . import common


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def checks(as_json: bool) -> int:
    """List every check (built-in and plugin): name, phase, source, what it verifies, its options."""
    from ..registry import discover

    loaded = discover()
    if as_json:
        common.print_json([lc.describe() for lc in loaded])
        return 0
    from rich.table import Table
    from rich.text import Text

    table = Table(header_style="bold", box=None)
    for col in ("name", "phase", "source", "verifies", "options"):
        table.add_column(col)
    for lc in loaded:
        opts = ", ".join(f"{k}={o.default!r}" for k, o in lc.check.options.items())
        table.add_row(Text(lc.name), Text(lc.check.phase), Text(lc.source), Text(lc.check.description), Text(opts))
    common.console().print(table)
    return 0
