"""What other monitors read from a command: --exit-codes nagios|npd (preflight) and --prometheus-textfile DIR
(preflight, nccl-bench): the options, and the glue between a command's document and report/monitors.py,
report/prometheus.py. A failed metrics write is one warning line; it never changes the verdict."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import click

from .. import trust
from ..errors import UsageError
from ..text import safe_text
from . import common

FLAG = "--exit-codes"


def _textfile_dir(ctx, param, value):
    """The directory must exist and be writable now: a typo is exit 2 before the work, not a lost metric after."""
    if value is None:
        return None
    if not value.strip():  # '' would be the current directory
        raise click.BadParameter("empty: name node_exporter's textfile directory", param_hint="--prometheus-textfile")
    p = Path(value)
    try:
        if not p.is_dir():
            raise click.BadParameter(f"{safe_text(value)[:200]}: no such directory (node_exporter's "
                                     "--collector.textfile.directory)",
                                     param_hint="--prometheus-textfile")
    except OSError as exc:  # a name too long, a loop of links
        raise click.BadParameter(f"{safe_text(value)[:200]}: {exc.strerror or exc}",
                                 param_hint="--prometheus-textfile") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{value}: not writable", param_hint="--prometheus-textfile")
    try:
        trust.guard_dir(p, "--prometheus-textfile")
    except UsageError as exc:
        raise click.BadParameter(str(exc).split(" ", 1)[1], param_hint="--prometheus-textfile") from None
    return p


def prometheus_option(func: Callable) -> Callable:
    return click.option("--prometheus-textfile", "prometheus_dir", metavar="DIR", callback=_textfile_dir,
                        help="Also write DIR/ddpdoctor.prom for node_exporter's textfile collector (atomic: temp "
                             "file and rename): check status, bus bandwidth, the run's time.")(func)


def exit_codes_option(func: Callable) -> Callable:
    from ..report.monitors import STYLES

    return click.option(FLAG, "exit_codes", type=click.Choice(STYLES), default="ddpdoctor", show_default=True,
                        help="Exit codes and stdout for another monitor: nagios (0 OK, 1 WARNING, 2 CRITICAL, "
                             "3 UNKNOWN; first line the status) or npd (node-problem-detector: 0 OK, 1 NonOK, "
                             "2 Unknown; one line of at most 80 characters).")(func)


def style_in(argv: list[str]) -> str | None:
    """--exit-codes nagios|npd on a preflight command line, read before click parses it: then even a usage error
    (click's own) ends as the monitor's UNKNOWN, never exit 2 with nothing on stdout."""
    from ..report.monitors import STYLES

    args = argv[: argv.index("--")] if "--" in argv else argv
    if "preflight" not in args:
        return None
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == FLAG and i + 1 < len(args) else \
            arg.split("=", 1)[1] if arg.startswith(FLAG + "=") else None
        if value in STYLES and value != "ddpdoctor":
            return value
    return None


def say(style: str, code: int, lines: list[str]) -> int:
    """The monitor's stdout, once. stdout that cannot be written (a full device, a closed pipe) loses the line, never
    the code: the monitor still gets a valid one, and no traceback at exit."""
    common.STATE.monitor_said = True
    try:
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    except (OSError, ValueError):
        _drop_stdout()
    return code


def _drop_stdout() -> None:
    """What stdout still buffers goes to /dev/null: the interpreter's flush at exit would fail again (exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def finish(code: int) -> int:
    """The exit code the monitor gets: the command's own when it printed its status, else UNKNOWN with the error."""
    from ..report.monitors import unknown

    style = common.STATE.monitor
    if style is None or common.STATE.monitor_said or code == 0:  # --help, --version: no verdict asked
        return code
    return say(style, *unknown(style, common.STATE.last_error or f"ddpdoctor exited {code} without a verdict"))


def monitor_render(style: str) -> Callable:
    """common.emit's render for --exit-codes: the monitor's lines on stdout instead of the terminal view."""
    from ..report.monitors import render

    def show(doc: dict, console) -> None:
        code, lines = render(doc, style)
        say(style, code, lines)

    return show


def monitor_code(style: str, doc: dict) -> int:
    from ..report.monitors import render

    return render(doc, style)[0]


def check_combination(style: str, as_json: bool) -> None:
    if style != "ddpdoctor" and as_json:
        raise UsageError(f"{FLAG} {style} and --json both want stdout: use --output DIR for the JSON")


def write_prometheus(doc: dict, directory: Path | None, command: str) -> None:
    """DIR/ddpdoctor.prom from the document (this host's series); a failure is a warning line."""
    if directory is None:
        return
    from ..report import prometheus

    try:
        path = prometheus.write(directory, prometheus.samples(doc, command=command, job=prometheus.job_id()), command)
    except OSError as exc:
        common.warn_line(f"--prometheus-textfile {directory}: not written ({exc.strerror or exc}); the verdict stands")
        return
    except UsageError as exc:  # as root, a directory another user can write: refused, the verdict stands
        common.warn_line(f"not written: {exc}; the verdict stands")
        return
    common.say_wrote("metrics", path)
