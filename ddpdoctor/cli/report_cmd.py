"""`ddpdoctor report FILES... -o report.html`: merge result files into one self-contained HTML page."""
from __future__ import annotations

import click

from ..errors import UsageError
from . import common


@click.command("report")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", default="ddpdoctor-report.html", show_default=True,
              type=click.Path(dir_okay=False), help="The HTML file to write.")
def report(files, output):
    """Merge preflight, nccl-bench and run-trainer JSON files into one HTML report.

    \b
    Examples:
      ddpdoctor report out/*.json -o cluster.html
      ddpdoctor report cluster.json bench.json ddpdoctor-run/RUN_ID/run.json
    """
    from .. import documents
    from ..report.html import write_html

    from ..inputs import MAX_INPUT_FILES, Budget

    target = common.ensure_writable_file(output, "-o/--output")
    if len(files) > MAX_INPUT_FILES:
        raise UsageError(f"{len(files)} files: at most {MAX_INPUT_FILES} in one report; merge fewer at a time")
    # Memory bounded in total, not only per file: bytes and JSON values over all files (inputs.Budget).
    budget = Budget()
    docs = [documents.load(f, budget) for f in files]  # a malformed or unknown file is a one-line usage error naming it
    run_ids = {d.get("run_id") for d in docs}
    if len(run_ids) > 1 and not all(d.get("kind") == "preflight" and d.get("scope") == "node" for d in docs):
        common.warn_line(f"merging {len(run_ids)} different runs; the report says so at the top")
    write_html(docs, target)
    if not common.STATE.quiet:
        from rich.text import Text

        common.console().print(Text(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB, {len(docs)} file(s))"))
    return 0
