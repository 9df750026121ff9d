"""`ddpdoctor report [FILES...] -o report.html`: merge result files (by default the latest of each kind, each
from its own run) into one self-contained HTML page."""
from __future__ import annotations

import re
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
@click.option("--history", is_flag=True,
              help="Each node's history over every result under --results-dir (the node check's records too): bus "
                   "bandwidth over runs, checks that flap, a node slower than its own past (default -o: "
                   "DIR/history.html).")
def report(files, output, results_dir, history):
    """Merge preflight, nccl-bench and run-trainer JSON files into one HTML report; without FILES, the latest
    result of each kind under ./ddpdoctor-results (each from its own run; the line printed says which).

    \b
    Examples:
      ddpdoctor report                                   # the latest result of each kind
      ddpdoctor report out/*.json -o cluster.html
      ddpdoctor report cluster.json bench.json ddpdoctor-results/RUN_ID/run.json
      ddpdoctor report --history --results-dir /var/lib/ddpdoctor/node-check
    """
    if history:
        from .report_history import history_report

        if files:
            raise UsageError("--history reads every result under --results-dir: give no FILES with it")
        return history_report(results_dir, output)
    from .. import documents
    from ..report.html import write_html

    from ..inputs import MAX_INPUT_FILES, Budget

    run_dir = latest = None
    if not files:
        latest = latest_of_each_kind(Path(results_dir))
        run_dir = max(latest, key=lambda g: g[3])[1]
        files = [str(f) for _, _, found, _ in latest for f in found]
    target = common.ensure_writable_file(output or str(run_dir / "report.html" if run_dir else "ddpdoctor-report.html"),
                                         "-o/--output")
    if len(files) > MAX_INPUT_FILES:
        raise UsageError(f"{len(files)} files: at most {MAX_INPUT_FILES} in one report; merge fewer at a time")
    # Memory bounded in total, not only per file: bytes and JSON values over all files (inputs.Budget).
    budget = Budget()
    docs = [documents.load(f, budget) for f in files]  # a malformed or unknown file is a one-line usage error naming it
    run_ids = {d.get("run_id") for d in docs}
    if latest is None and len(run_ids) > 1 and not all(d.get("kind") == "preflight" and d.get("scope") == "node"
                                                         for d in docs):
        common.warn_line(f"merging {len(run_ids)} different runs; the report says so at the top")
    write_html(docs, target)
    if not common.STATE.quiet:
        from rich.text import Text

        if latest is not None:  # each kind's latest result, from its own run: say which run each came from
            common.console().print(Text(f"latest of each kind in {run_dir.parent}: " + "; ".join(
                f"{kind} from run {run.name} (read {', '.join(f.name for f in found)})"
                for kind, run, found, _ in latest)), soft_wrap=True)
        common.console().print(Text(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB, "
                                    f"{len(docs)} file{'s' if len(docs) != 1 else ''})"), soft_wrap=True)
    return ExitCode.OK


def latest_of_each_kind(root: Path) -> list[tuple[str, Path, list[Path], float]]:
    """(kind, its run directory, the files, their newest mtime) for each kind of result under ROOT: a run
    directory's files of one kind come together (a cluster's cluster.json stands for the nodes' node-*.json
    beside it), from the run whose files of that kind are newest."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is not a directory: give --results-dir a directory of saved results, or name "
                         "the files: ddpdoctor report FILE...")
    try:
        candidates = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    except OSError as exc:
        raise UsageError(f"{root}: cannot read ({exc.strerror or exc})") from exc
    best: dict[str, tuple[str, Path, list[Path], float]] = {}
    for run in candidates:
        by_kind: dict[str, list[Path]] = {}
        for f in result_files(run):
            by_kind.setdefault(kind_of(f), []).append(f)
        for kind, found in by_kind.items():
            newest = max(_mtime(f) for f in found)
            if kind not in best or newest > best[kind][3]:
                best[kind] = (kind, run, found, newest)
    if not best:
        raise UsageError(f"no results in {root}/ to report on: run `ddpdoctor preflight` (or nccl-bench, run-trainer) "
                         "here first, or name the files: ddpdoctor report FILE...")
    order = ("preflight", "nccl-bench", "run", "postmortem")  # the workflow's order; any other kind after them
    return sorted(best.values(), key=lambda g: (order.index(g[0]) if g[0] in order else len(order), g[0]))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


HEAD_BYTES = 4096  # a document's envelope (schema, kind) comes first: documents.envelope's order


def kind_of(path: Path) -> str:
    """A saved document's kind as `report` names it: "preflight", "nccl-bench", "run" (run.json),
    "postmortem", or the envelope's own kind for any other (read from the file's first bytes)."""
    if path.name in KIND_BY_NAME:
        return KIND_BY_NAME[path.name]
    if path.name.startswith("node-"):
        return "preflight"
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return "unknown"
    found = ENVELOPE_KIND.search(head)
    return found["kind"] if found else "unknown"


KIND_BY_NAME = {"cluster.json": "preflight", "nccl-bench.json": "nccl-bench", "run.json": "run",
                "postmortem.json": "postmortem"}
ENVELOPE_KIND = re.compile(r'"schema": "ddpdoctor",[^{}]{0,200}?"kind": "(?P<kind>[a-z][a-z0-9-]{0,40})"')


# The files the commands save in a run's directory (common.emit's filenames). Anything else there is not
# theirs: the reference trainer's resumed.json (written on --resume), a user script's own JSON.
SAVED = ("cluster.json", "node-*.json", "nccl-bench.json", "run.json", "postmortem.json")


def result_files(run: Path) -> list[Path]:
    """The documents a command saves in a run's directory (run-trainer's own records beside them are not):
    the names above, and any other top-level JSON file whose envelope says it is a ddpdoctor document of a
    kind of its own (a command added later, such as attach, needs no entry here)."""
    files = sorted({p for pattern in SAVED for p in run.glob(pattern) if p.is_file() and not p.name.startswith(".")})
    others = sorted(p for p in run.glob("*.json") if p not in files and p.is_file() and not p.name.startswith("."))
    files += [p for p in others[:64] if kind_of(p) not in ("unknown", "preflight", "nccl-bench", "run-trainer")]
    if any(p.name == "cluster.json" for p in files):
        files = [p for p in files if not p.name.startswith("node-")]
    return files
