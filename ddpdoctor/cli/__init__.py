"""The CLI root: a thin click group, the one error policy, and the list of commands (one module each).

Error policy, for every command: a user mistake (click usage errors, ddpdoctor UsageError) is one red
line on stderr and exit 2; a cluster that did not assemble is exit 3; anything unexpected is one line
and exit 4. ``-v`` adds the traceback. Nothing here imports torch: ``ddpdoctor --help`` stays fast.
"""
from __future__ import annotations

import importlib
import re
import sys
import traceback

import click

from .. import __version__
from ..errors import DdpdoctorError
from ..exitcodes import ExitCode
from ..lifetime import Terminated
from . import common

COMMANDS = {
    # name -> "module:attribute"; imported when the group is built (each module is torch-free at import).
    "preflight": "ddpdoctor.cli.preflight:preflight",
    "checks": "ddpdoctor.cli.checks_cmd:checks",
    "nccl-bench": "ddpdoctor.cli.bench_cmd:nccl_bench",
    "run-trainer": "ddpdoctor.cli.trainer_cmd:run_trainer",
    "postmortem": "ddpdoctor.cli.postmortem_cmd:postmortem",
    "report": "ddpdoctor.cli.report_cmd:report",
    "attach": "ddpdoctor.cli.attach_cmd:attach",
    "node-check": "ddpdoctor.cli.node_check_cmd:node_check",
}


# Help is pasted from: a `quoted command` and a hyphenated or dotted name (`--skip gpu-perf`,
# clock-skew.warn_ms, --nproc-per-node) never break across lines. click wraps with textwrap's default
# break_on_hyphens=True and has no setting for it, so the formatter hands click's wrapping these characters
# replaced by same-width placeholders and puts them back in the finished text: the layout is click's own.
_SPACE_KEPT, _HYPHEN_KEPT = "\x00", "\x01"
_QUOTED = re.compile(r"`[^`]*`")


def _protect(text: str) -> str:
    return _QUOTED.sub(lambda m: m.group().replace(" ", _SPACE_KEPT), text).replace("-", _HYPHEN_KEPT)


class HelpFormatter(click.HelpFormatter):
    """click's formatter (public API: Context.formatter_class), wrapping without breaking tokens."""

    def write_text(self, text: str) -> None:
        super().write_text(_protect(text))

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        super().write_dl([(first, _protect(second)) for first, second in rows], col_max, col_spacing)

    def getvalue(self) -> str:
        return super().getvalue().replace(_SPACE_KEPT, " ").replace(_HYPHEN_KEPT, "-")


class Context(click.Context):
    formatter_class = HelpFormatter


class CommandLoadError(DdpdoctorError):
    """A built-in command's module does not import: a broken install or a bug, never a command to hide."""

    exit_code = ExitCode.INTERNAL


class LazyGroup(click.Group):
    """Loads a command's module only when that command (or the full help) is needed."""

    context_class = Context

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """An unknown command names the closest ones, most similar first (click suggests none for commands)."""
        name = str(args[0]) if args else ""
        if name in COMMANDS or name.startswith("-"):
            return super().resolve_command(ctx, args)
        import difflib

        close = difflib.get_close_matches(name, sorted(COMMANDS), n=3, cutoff=0.6)
        if not close:
            return super().resolve_command(ctx, args)
        others = f" (or {', '.join(repr(c) for c in close[1:])})" if len(close) > 1 else ""
        raise click.UsageError(f"No such command {name!r}. Did you mean {close[0]!r}?{others}", ctx)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            command = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:  # every name in COMMANDS ships with ddpdoctor
            raise CommandLoadError(f"the built-in command {name!r} cannot be loaded ({module_name}): "
                                   f"{type(exc).__name__}: {exc}; reinstall ddpdoctor, or report the bug "
                                   "(run with -v for the traceback)") from exc
        return with_global_flags(command)


def _set_verbose(ctx, param, value: int) -> int:
    if value:
        common.STATE.verbose = max(common.STATE.verbose, value)
    return value


def _set_quiet(ctx, param, value: bool) -> bool:
    if value:
        common.STATE.quiet = True
    return value


def with_global_flags(cmd: click.Command) -> click.Command:
    """-v/-q after the subcommand too (`ddpdoctor preflight -v`), as users type them; hidden in the
    command's help (the root's help lists them once)."""
    if not getattr(cmd, "_ddpdoctor_global_flags", False):
        cmd.params.append(click.Option(["-v", "--verbose"], count=True, expose_value=False, hidden=True,
                                       callback=_set_verbose, help="More detail, tracebacks of errors."))
        cmd.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, hidden=True,
                                       callback=_set_quiet, help="Only the verdict and failures."))
        cmd._ddpdoctor_global_flags = True
    cmd.context_class = Context  # its help wraps as the root's does
    return cmd


# auto_envvar_prefix: every option of every command is mirrored once as DDPDOCTOR_<COMMAND>_<OPTION>
# (DDPDOCTOR_PREFLIGHT_TIMEOUT=30), beside the few shared names options declare (DDPDOCTOR_MASTER, _TOKEN...).
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100,
                                              "auto_envvar_prefix": "DDPDOCTOR"})
@click.version_option(__version__, "--version", prog_name="ddpdoctor")
# The callbacks put -v/-q in effect while the command is looked up (one that cannot load: its traceback with -v).
@click.option("-v", "--verbose", count=True, callback=_set_verbose,
              help="More detail; -v also shows tracebacks of errors.")
@click.option("-q", "--quiet", is_flag=True, callback=_set_quiet, help="Only the verdict and failures.")
def cli(verbose: int, quiet: bool) -> None:
    """Check a PyTorch DDP cluster before the job burns GPU hours, benchmark it, launch and explain.

    \b
    Exit codes: 0 passed (warnings allowed) · 1 a check failed · 2 usage or bad input
                3 the cluster did not assemble · 4 internal error
                5 not verified (a cluster node without the run's key or token; a log dir with no sign of a normal end)
    """
    common.STATE.verbose = verbose
    common.STATE.quiet = quiet


def _on_sigterm(signum, frame) -> None:
    raise Terminated(signum)  # SIGTERM or SIGHUP


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the group under the one error policy and exits with its code."""
    import signal
    import threading

    from ..lifetime import mark_command_start, redeliver_lost_stops

    mark_command_start()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.signal(signal.SIGHUP, _on_sigterm)  # a dropped ssh session: the same clean-up, exit 129
        redeliver_lost_stops()
    code = run(argv)
    _exit(code)


def _exit(code: int) -> None:
    """Exit without interpreter finalisation when a helper thread is still inside native code (a store
    call abandoned at its time limit, a gather past its deadline): finalising under such a thread can
    abort the process (`terminate called ...`) after the result was already printed."""
    import os
    import threading

    sys.stdout.flush()
    sys.stderr.flush()
    if any(t.is_alive() for t in threading.enumerate() if t is not threading.main_thread()):
        os._exit(code)
    sys.exit(code)


def _stopped_by(exc: BaseException) -> int | None:
    """A stop signal that reached the command as another exception (torch's SignalException, raised by the
    handler its launcher installs): the same line and code as the signal's own, never "internal error"."""
    import signal

    from ..lifetime import stop_signal_of

    sig = stop_signal_of(exc)
    if sig is None:
        return None
    if sig == signal.SIGINT:
        common.error_line("interrupted")
        return ExitCode.INTERRUPTED
    common.error_line(f"terminated ({signal.Signals(sig).name})")
    return 128 + int(sig)


SCRIPT_HINT = ("options for your script go after `--`: ddpdoctor run-trainer [OPTIONS] -- train.py --lr 3e-4")


def run(argv: list[str] | None = None) -> int:
    """The command's exit code; with --exit-codes nagios|npd, the monitor's (an error: its UNKNOWN line)."""
    from .monitoring import finish, style_in

    argv = list(sys.argv[1:] if argv is None else argv)
    common.STATE.monitor, common.STATE.monitor_said = style_in(argv), False
    # Each run from the defaults: a command that cannot load is looked up before the root's callback resets -v,
    # so an earlier run's -v in this process (a test's) printed its traceback without -v here
    common.STATE.verbose, common.STATE.quiet = 0, False
    return finish(_run(argv))


def _run(argv: list[str]) -> int:
    if not argv:  # `ddpdoctor` alone: the help, as git and torchrun do
        click.echo(cli.get_help(Context(cli, info_name="ddpdoctor")))
        return ExitCode.OK
    try:
        rv = cli.main(args=argv, prog_name="ddpdoctor", standalone_mode=False)
        return int(rv or 0)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Terminated as exc:
        common.error_line(f"terminated ({exc.name})")
        return 128 + exc.signum
    except click.exceptions.Abort as exc:  # click turns KeyboardInterrupt (and so SIGTERM) into Abort
        if isinstance(exc.__cause__, Terminated):
            common.error_line(f"terminated ({exc.__cause__.name})")
            return 128 + exc.__cause__.signum
        common.error_line("interrupted")
        return ExitCode.INTERRUPTED
    except click.NoSuchOption as exc:
        hint = f" ({SCRIPT_HINT})" if exc.ctx is not None and exc.ctx.info_name == "run-trainer" else ""
        common.error_line(common.usage_message(exc) + hint)
        return ExitCode.USAGE
    except click.ClickException as exc:
        common.error_line(exc.format_message())
        return ExitCode.USAGE
    except DdpdoctorError as exc:
        if common.STATE.verbose:
            traceback.print_exc()
        common.error_line(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        common.error_line("interrupted")
        return ExitCode.INTERRUPTED
    except PermissionError as exc:  # a folder or file of mode 000 met where no reader expected one: bad input
        common.error_line(f"{exc.filename or ''}: permission denied ({exc.strerror or exc})".lstrip(": "))
        return ExitCode.USAGE
    except Exception as exc:  # noqa: BLE001 - the policy: one line, exit 4, traceback with -v
        stopped = _stopped_by(exc)
        if stopped is not None:
            return stopped
        if common.STATE.verbose:
            traceback.print_exc()
        common.error_line(f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)")
        return ExitCode.INTERNAL
