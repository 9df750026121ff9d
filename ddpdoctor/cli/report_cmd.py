"""`ddpdoctor report [FILES...] -o report.html`: merge result files (by default the latest run's) into one
self-contained HTML page."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from ..exitcodes import ExitCode
from . import common


@click.command("report")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="The HTML file to write (default: report.html in the run's results directory; "
                   "ddpdoctor-report.html when FILES are given).")
@click.option("--results-dir", "results_dir", default=common.RESULTS_DIR, show_default=True, metavar="DIR",
              envvar="DDPDOCTOR_RESULTS_DIR",
              help="Where the latest run is looked for when no FILES are given (or $DDPDOCTOR_RESULTS_DIR).")
def report(files, output, results_dir):
    """Merge preflight, nccl-bench and run-trainer JSON files into one HTML report; without FILES, the files
    of the latest run under ./ddpdoctor-results.

    \b
    Examples:
      ddpdoctor report                                   # the latest run's results
      ddpdoctor report out/*.json -o cluster.html
      ddpdoctor report cluster.json bench.json ddpdoctor-results/RUN_ID/run.json
    """
    from .. import documents
    from ..report.html import write_html

    from ..inputs import MAX_INPUT_FILES, Budget

    run_dir = None
    if not files:
        run_dir, files = latest_run(Path(results_dir))
    target = common.ensure_writable_file(output or str(run_dir / "report.html" if run_dir else "ddpdoctor-report.html"),
                                         "-o/--output")
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

        if run_dir is not None:
            common.console().print(Text(f"latest run in {run_dir.parent}: {run_dir.name}; read "
                                        + ", ".join(Path(f).name for f in files)), soft_wrap=True)
        common.console().print(Text(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB, "
                                    f"{len(docs)} file{'s' if len(docs) != 1 else ''})"), soft_wrap=True)
    return ExitCode.OK


def latest_run(root: Path) -> tuple[Path, list[str]]:
    """The run directory under ROOT whose result files are newest, and its result files: the cluster's
    cluster.json stands for the nodes' own node-*.json beside it (it holds every node's facts)."""
    runs = []
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is not a directory: give --results-dir a directory of saved results, or name "
                         "the files: ddpdoctor report FILE...")
    try:
        candidates = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    except OSError as exc:
        raise UsageError(f"{root}: cannot read ({exc.strerror or exc})") from exc
    for run in candidates:
        found = result_files(run)
        if found:
            runs.append((max(f.stat().st_mtime for f in found), run, found))
    if not runs:
        raise UsageError(f"no results in {root}/ to report on: run `ddpdoctor preflight` (or nccl-bench, run-trainer) "
                         "here first, or name the files: ddpdoctor report FILE...")
    _, run, found = max(runs, key=lambda r: r[0])
    return run, [str(f) for f in found]


# The files the commands save in a run's directory (common.emit's filenames). Anything else there is not
# theirs: the reference trainer's resumed.json (written on --resume), a user script's own JSON.
SAVED = ("cluster.json", "node-*.json", "nccl-bench.json", "run.json", "postmortem.json")


def result_files(run: Path) -> list[Path]:
    """The documents a command saves in a run's directory (run-trainer's own records beside them are not)."""
    files = sorted({p for pattern in SAVED for p in run.glob(pattern) if p.is_file() and not p.name.startswith(".")})
    if any(p.name == "cluster.json" for p in files):
        files = [p for p in files if not p.name.startswith("node-")]
    return files
