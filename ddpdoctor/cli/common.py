"""What every command shares: verbosity state, the consoles, the error line, and the output options.

Human output goes to stdout unless ``--json`` is given; then stdout carries only JSON and every human
line (progress, summary) moves to stderr, so ``ddpdoctor preflight --json | jq`` always works.
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click

from ..errors import UsageError
from ..inputs import MAX_TIMEOUT_S
from ..text import doc_without_surrogates


@dataclass
class _State:
    verbose: int = 0
    quiet: bool = False
    monitor: str | None = None  # --exit-codes nagios|npd: another monitor reads the exit code and stdout
    monitor_said: bool = False  # the monitor's status line is out (else an error becomes its UNKNOWN line)
    last_error: str | None = None  # the error line's text, for that UNKNOWN line


STATE = _State()


def console(stderr: bool = False):
    """A rich Console; imported lazily because rich costs ~50 ms and --help must stay quick."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def error_line(message: str) -> None:
    """The one red line of the error policy (no markup interpretation, no escape sequences: messages may
    hold text from other nodes)."""
    text = " ".join(str(message).split("\n")[:1]) if not STATE.verbose else str(message)
    STATE.last_error = " ".join(str(message).split("\n")[:1])
    try:
        from rich.console import Console
        from rich.text import Text

        from ..text import safe_text

        text = safe_text(text)
        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(f"Error: {text}", style="bold red"))
    except Exception:  # noqa: BLE001 - the error path must not fail
        print(f"Error: {text}", file=sys.stderr)


def usage_message(exc: click.ClickException) -> str:
    """click's message, with "did you mean" ranked by similarity (click sorts its suggestions alphabetically:
    `--nnode` got '--code', '--nnodes', '--node-rank'): the closest first, the others after it."""
    name = getattr(exc, "option_name", None) or getattr(exc, "command_name", None)
    if not name or not getattr(exc, "possibilities", None):
        return exc.format_message()
    import difflib

    ranked = sorted(exc.possibilities, key=lambda p: -difflib.SequenceMatcher(None, name, p).ratio())
    others = f" (or {', '.join(repr(p) for p in ranked[1:])})" if len(ranked) > 1 else ""
    return f"{exc.message} Did you mean {ranked[0]!r}?{others}"


def warn_line(message: str) -> None:
    """A one-line warning on stderr (yellow); the command goes on."""
    from rich.console import Console
    from rich.text import Text

    from ..text import safe_text

    Console(stderr=True, highlight=False, soft_wrap=True).print(Text(f"Warning: {safe_text(message)}", style="yellow"))


class FiniteFloat(click.ParamType):
    """A float within [min, max] that is neither NaN nor infinite.

    click.FloatRange lets NaN through (every comparison with NaN is false) and accepts inf, and a timeout of
    NaN or inf turns into a hang or an OverflowError far from the flag; this type stops both at parsing."""

    name = "float"

    def __init__(self, min: float | None = None, max: float | None = None) -> None:
        self.min, self.max = min, max

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            self.fail(f"{value!r} is not in the range {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        low = "-inf" if self.min is None else f"{self.min:g}"
        high = "inf" if self.max is None else f"{self.max:g}"
        return f"{low} to {high}"

    def __repr__(self) -> str:
        return f"FiniteFloat({self.min!r}, {self.max!r})"


# Every --timeout flag: at least a second, at most a week (inputs.MAX_TIMEOUT_S), finite.
TIMEOUT = FiniteFloat(1, MAX_TIMEOUT_S)


def _take_run_id(ctx, param, value):
    from ..inputs import check_run_id

    if value is None:
        return None
    from_env = ctx.get_parameter_source(param.name) == click.core.ParameterSource.ENVIRONMENT
    check_run_id(value, "$DDPDOCTOR_RUN_ID" if from_env else "--run-id")
    os.environ["DDPDOCTOR_RUN_ID"] = value  # the child processes (nodes, ranks) carry the same id
    return value


def run_id_option(func: Callable) -> Callable:
    """--run-id: the id this command's document carries, shared across a workflow (preflight, nccl-bench,
    run-trainer) so `report` merges them as one run; default $DDPDOCTOR_RUN_ID, else the scheduler's job id."""
    return click.option("--run-id", envvar="DDPDOCTOR_RUN_ID", callback=_take_run_id, expose_value=False,
                        help="Id shared by one workflow's documents (default: $DDPDOCTOR_RUN_ID, else "
                             "$SLURM_JOB_ID / $PBS_JOBID, else new).")(func)


# Where every command keeps its results without being asked: RESULTS_DIR/<run id>/ in the working directory
# (run-trainer's run directory is the same folder), so `ddpdoctor report` finds the latest run there.
RESULTS_DIR = "ddpdoctor-results"


def output_options(func: Callable) -> Callable:
    """--json, --output DIR and --report PATH, the same on every command that produces results."""
    func = click.option("--report", "report_path", type=click.Path(dir_okay=False),
                        help="Also write a self-contained HTML report to this file.")(func)
    func = click.option("--output", "-o", "output_dir", type=click.Path(file_okay=False),
                        help=f"Write the JSON result file(s) into this directory (instead of {RESULTS_DIR}/RUN_ID).")(func)
    func = click.option("--json", "as_json", is_flag=True, help="Print the JSON result on stdout (and nothing else).")(func)
    return func


def save_options(func: Callable) -> Callable:
    """--results-dir and --no-save: where results are kept by default (RESULTS_DIR/<run id>/), or not at all."""
    func = click.option("--no-save", "no_save", is_flag=True, envvar="DDPDOCTOR_NO_SAVE",
                        help=f"Keep no result file (default: saved under {RESULTS_DIR}/RUN_ID/; or $DDPDOCTOR_NO_SAVE=1).")(func)
    func = click.option("--results-dir", "results_dir", default=RESULTS_DIR, show_default=True, metavar="DIR",
                        envvar="DDPDOCTOR_RESULTS_DIR",  # not checked here: a bad one never stops a verdict
                        help="Results are kept in DIR/RUN_ID/ (or $DDPDOCTOR_RESULTS_DIR).")(func)
    return func


@dataclass
class Saving:
    """The default save: RESULTS_DIR/<run id>/ unless --output, --no-save. A failure to write there is one
    warning line after the result, never a changed verdict (an explicit --output that fails is exit 2)."""

    root: Path | None  # None: nothing kept (--no-save, or --output given instead)

    def directory(self, run_id: str | None) -> Path | None:
        from ..documents import results_dir_name

        return None if self.root is None else self.root / results_dir_name(run_id)


def saving(results_dir: str | None, no_save: bool, output_dir) -> Saving:
    return Saving(None if no_save or output_dir or not results_dir else Path(results_dir))


def default_result_dir(save: Saving) -> Path | None:
    """The default save's directory for this command, fixed before the work starts: the run id is pinned in
    $DDPDOCTOR_RUN_ID (its own children and the document then carry the same one), so a cluster's master can
    tell the other nodes where its cluster.json will be. None when nothing is kept by default."""
    from ..documents import new_run_id

    if save.root is None:
        return None
    run_id = new_run_id()
    os.environ["DDPDOCTOR_RUN_ID"] = run_id
    return save.directory(run_id).resolve()


def ensure_writable_dir(path: str | None) -> Path | None:
    """Create the output directory up front, so an unwritable one is a usage error before any work."""
    if not path:
        return None
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output {p}: cannot create directory ({exc.strerror or exc})") from exc
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(f"--output {p}: directory is not writable")
    return p


def ensure_writable_file(path: str | None, flag: str = "--report") -> Path | None:
    if not path:
        return None
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{flag} {p}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{flag} {p}: not writable")
    from ..documents import write_target

    try:
        write_target(p)  # a device, FIFO or directory there: said now, before the work
    except UsageError as exc:
        raise UsageError(f"{flag} {exc}") from None
    return p


def print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
    sys.stdout.flush()


def write_report(docs: list[dict], path: Path | None) -> None:
    """--report on any command: the HTML report of what this command produced."""
    if path is None:
        return
    from ..report.html import write_html

    write_html(docs, path)


def emit(doc: dict, *, filename: str | None, out_dir: Path | None, report_file: Path | None, as_json: bool,
         render: Callable[[dict, Any], None], save: Saving | None = None, unwritten: list[str] | None = None) -> int:
    """The end of every command: the result is shown first (the JSON on stdout with --json, else the terminal
    view), then written (--output's JSON file, --report's HTML, else the default results directory). A write
    asked for that fails (a full disk) is one error line naming the path and the free space (with what the
    command could not write before: ``unwritten``), after the result was shown: nothing of it is lost, and a
    full disk never changes the verdict's exit code. The default save failing is one warning line. The files
    are written even when rendering fails. Returns the document's exit code."""
    doc = doc_without_surrogates(doc)  # a lone surrogate from a file or a folder name: no encoder takes it
    try:
        if as_json:
            print_json(doc)
        else:
            render(doc, console())
    finally:
        problems = _write_files(doc, filename, out_dir, report_file)
        if out_dir is None and save is not None and filename:
            _save_default(doc, filename, save)
    problems = list(unwritten or []) + problems
    if problems:
        error_line("; ".join(problems))
    return doc["exit_code"]


def _save_default(doc: dict, filename: str, save: Saving) -> None:
    from .. import documents

    where = save.directory(doc.get("run_id"))
    if where is None:
        return
    try:
        say_wrote("result", documents.dump(doc, where / filename))
    except UsageError as exc:
        warn_line(f"result not saved: {exc} (the verdict above stands; --no-save keeps nothing)")


def _write_files(doc: dict, filename: str | None, out_dir: Path | None, report_file: Path | None) -> list[str]:
    """Every file asked for, each tried even when another failed; the failures' messages."""
    from .. import documents

    problems = []
    if out_dir is not None and filename:
        try:
            say_wrote("result", documents.dump(doc, out_dir / filename))
        except UsageError as exc:
            problems.append(str(exc))
    try:
        write_report([doc], report_file)
        if report_file is not None:
            say_wrote("report", report_file)
    except UsageError as exc:
        problems.append(str(exc))
    return problems


def say_wrote(what: str, path) -> None:
    """Every command says where it wrote each file (on stderr: stdout may be carrying --json)."""
    if not STATE.quiet:
        print(f"wrote {what}: {path}", file=sys.stderr, flush=True)
