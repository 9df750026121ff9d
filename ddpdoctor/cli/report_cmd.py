"""`ddpdoctor report [FILES...] -o report.html`: merge result files (by default the last run's, every command
saved under its run id, with the newest run of each workflow step before it; --run picks others) into one
self-contained HTML page."""
from __future__ import annotations

import re
from dataclasses import dataclass
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
              help="Where the saved runs are looked for when no FILES are given (or $DDPDOCTOR_RESULTS_DIR).")
@click.option("--run", "run_ids", multiple=True, metavar="RUN_ID",
              help="Without FILES: the runs to report on (repeat it), instead of the last one and the workflow "
                   "before it; the line printed after a report names the others.")
@click.option("--history", is_flag=True,
              help="Each node's history over every result under --results-dir (the node check's records too): bus "
                   "bandwidth over runs, checks that flap, a node slower than its own past (default -o: "
                   "DIR/history.html).")
def report(files, output, results_dir, run_ids, history):
    """Merge preflight, nccl-bench, run-trainer, postmortem and attach results into one HTML report; without
    FILES, the last run under ./ddpdoctor-results (every command saved under its run id) with the newest run
    of each workflow step before it (preflight, nccl-bench, run-trainer each under its own id: all three), and
    one line naming the other runs there and how to add them.

    \b
    Examples:
      ddpdoctor report                                   # the last run and the workflow before it
      ddpdoctor report --run 9650508d4e46 --run 20261127-184111-583e6f    # these runs together
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

    if run_ids and files:
        raise UsageError("--run picks saved runs; with FILES given, name their files instead")
    chosen = others = None
    if not files:
        chosen, others = pick_runs(Path(results_dir), run_ids)
        files = [str(f) for r in chosen for f in r.files]
    run_dir = chosen[0].path if chosen else None
    target = common.ensure_writable_file(output or str(run_dir / "report.html" if run_dir else "ddpdoctor-report.html"),
                                         "-o/--output")
    if len(files) > MAX_INPUT_FILES:
        raise UsageError(f"{len(files)} files: at most {MAX_INPUT_FILES} in one report; merge fewer at a time")
    # Memory bounded in total, not only per file: bytes and JSON values over all files (inputs.Budget).
    budget = Budget()
    docs = [documents.load(f, budget) for f in files]  # a malformed or unknown file is a one-line usage error naming it
    # each file holds at most MAX_NODES nodes; so do all of them together (files of one cluster repeat its nodes)
    documents.check_node_count({n: None for d in docs if d.get("kind") == "preflight" for n in d.get("nodes") or {}},
                               f"{len(docs)} files together")
    run_ids_read = {d.get("run_id") for d in docs}
    if chosen is None and len(run_ids_read) > 1 and not all(d.get("kind") == "preflight" and d.get("scope") == "node"
                                                             for d in docs):
        common.warn_line(f"merging {len(run_ids_read)} different runs; the report says so at the top")
    write_html(docs, target)
    if not common.STATE.quiet:
        from rich.text import Text

        if chosen is not None:  # which runs it read, and what else the results directory holds
            for line in selection_lines(Path(results_dir), chosen, others, bool(run_ids)):
                common.console().print(Text(line), soft_wrap=True)
        common.console().print(Text(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB, "
                                    f"{len(docs)} file{'s' if len(docs) != 1 else ''})"), soft_wrap=True)
    return ExitCode.OK


@dataclass
class SavedRun:
    """One run directory's results: the files the commands saved there, their kinds, the newest one's mtime."""

    path: Path
    files: list[Path]
    kinds: list[str]
    newest: float


def saved_runs(root: Path) -> list[SavedRun]:
    """Every run directory under ROOT that holds a result, the newest first (a cluster's cluster.json stands for
    the nodes' node-*.json beside it)."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is not a directory: give --results-dir a directory of saved results, or name "
                         "the files: ddpdoctor report FILE...")
    try:
        candidates = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    except OSError as exc:
        raise UsageError(f"{root}: cannot read ({exc.strerror or exc})") from exc
    runs = []
    for run in candidates:
        found = result_files(run)
        if found:
            kinds = list(dict.fromkeys(kind_of(f) for f in found))
            runs.append(SavedRun(run, found, sorted(kinds, key=_workflow_order), max(_mtime(f) for f in found)))
    return sorted(runs, key=lambda r: -r.newest)


def pick_runs(root: Path, run_ids: tuple[str, ...]) -> tuple[list[SavedRun], list[SavedRun]]:
    """(the runs to report on, the others): the last run with the workflow that led to it (``workflow_runs``),
    or the runs --run names, the newest first."""
    runs = saved_runs(root)
    if not runs:
        raise UsageError(f"no results in {root}/ to report on: run `ddpdoctor preflight` (or nccl-bench, run-trainer) "
                         "here first, or name the files: ddpdoctor report FILE...")
    if not run_ids:
        chosen = workflow_runs(runs)
        return chosen, [r for r in runs if r not in chosen]
    by_name = {r.path.name: r for r in runs}
    unknown = [i for i in run_ids if i not in by_name]
    if unknown:
        known = ", ".join(r.path.name for r in runs[:8]) + (" ..." if len(runs) > 8 else "")
        raise UsageError(f"--run {unknown[0]}: no saved results under {root}/{unknown[0]}; the runs there, newest "
                         f"first: {known}")
    chosen = [r for r in runs if r.path.name in set(run_ids)]
    return chosen, [r for r in runs if r not in chosen]


WORKFLOW_GAP_S = 24 * 3600  # a run older than this before the last one is another day's work, not its workflow


def workflow_runs(runs: list[SavedRun]) -> list[SavedRun]:
    """The last run (every command saved under its id: a job's preflight, nccl-bench and run-trainer together),
    then, going back, the newest run of each step of the workflow before the last run's step (a run's step: its
    latest kind in WORKFLOW, run-trainer's own preflight beside run.json does not make it a preflight): a plain
    preflight, nccl-bench and run-trainer, each under its own run id, are one report. A second run of a step
    already taken (an earlier run-trainer, a preflight before the one taken), and a run more than WORKFLOW_GAP_S
    before the last, are left out (named, with the --run line that adds them)."""
    last = runs[0]
    chosen, step = [last], _step(last)
    for older in runs[1:]:
        if last.newest - older.newest > WORKFLOW_GAP_S:
            break
        if _step(older) < step:
            chosen.append(older)
            step = _step(older)
    return chosen


def _step(run: SavedRun) -> int:
    return max(_workflow_order(k)[0] for k in run.kinds)


COMMAND_OF_KIND = {"run": "run-trainer"}  # how `report` names a kind: as the command the user typed
SHOWN_OTHERS = 6


def _commands(run: SavedRun) -> str:
    return ", ".join(COMMAND_OF_KIND.get(k, k) for k in run.kinds)


def selection_lines(root: Path, chosen: list[SavedRun], others: list[SavedRun], picked: bool) -> list[str]:
    """What the report holds (each run: its commands and files) and what it left out, with the line that adds it."""
    import time

    which = "the runs asked for" if picked else "the last run" if len(chosen) == 1 else \
        "the last run and the workflow before it"
    lines = [f"{which} in {root}: " + "; ".join(
        f"{r.path.name}: {_commands(r)} (read {', '.join(f.name for f in r.files)})" for r in chosen)]
    if others:
        now = time.time()
        listed = "; ".join(f"{r.path.name} ({_commands(r)}, {_ago(now - r.newest)})" for r in others[:SHOWN_OTHERS])
        more = f"; and {len(others) - SHOWN_OTHERS} older" if len(others) > SHOWN_OTHERS else ""
        add = " ".join(f"--run {r.path.name}" for r in [*chosen, others[0]])
        lines.append(f"not in this report, {len(others)} other run{'s' if len(others) != 1 else ''} in {root}, newest "
                     f"first: {listed}{more}. To add one: ddpdoctor report {add}")
    return lines


def _ago(seconds: float) -> str:
    minutes = max(0, int(seconds // 60))
    if minutes < 1:
        return "just now"
    if minutes < 120:
        return f"{minutes} min ago"
    return f"{minutes // 60} h ago" if minutes < 48 * 60 else f"{minutes // 1440} days ago"


WORKFLOW = ("preflight", "nccl-bench", "run", "postmortem", "attach")  # the workflow's order; any other kind after


def _workflow_order(kind: str) -> tuple[int, str]:
    return (WORKFLOW.index(kind) if kind in WORKFLOW else len(WORKFLOW), kind)


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
    from ..documents import ATTACH_WHOLE

    files = sorted({p for pattern in SAVED for p in run.glob(pattern) if p.is_file() and not p.name.startswith(".")})
    others = sorted(p for p in run.glob("*.json") if p not in files and p.is_file() and not p.name.startswith("."))
    files += [p for p in others[:64] if kind_of(p) not in ("unknown", "preflight", "nccl-bench", "run-trainer")]
    if any(p.name == "cluster.json" for p in files):
        files = [p for p in files if not p.name.startswith("node-")]
    if any(p.name == ATTACH_WHOLE for p in files):  # the whole job's verdict stands for the nodes' parts
        files = [p for p in files if not p.name.startswith("attach-")]
    return files
