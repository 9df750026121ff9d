"""The CLI root: a thin click group, the one error policy, and the list of commands (one module each).

Error policy, for every command: a user mistake (click usage errors, ddpdoctor UsageError) is one red
line on stderr and exit 2; a cluster that did not assemble is exit 3; anything unexpected is one line
and exit 4. ``-v`` adds the traceback. Nothing here imports torch: ``ddpdoctor --help`` stays fast.
"""
from __future__ import annotations

import sys
import traceback

import click

from .. import __version__
from ..errors import DdpdoctorError
from ..documents import EXIT_INTERNAL, EXIT_USAGE
from . import common

COMMANDS = {
    # name -> "module:attribute"; imported when the group is built (each module is torch-free at import).
    "preflight": "ddpdoctor.cli.preflight:preflight",
    "checks": "ddpdoctor.cli.checks_cmd:checks",
    "nccl-bench": "ddpdoctor.cli.bench_cmd:nccl_bench",
    "run-trainer": "ddpdoctor.cli.trainer_cmd:run_trainer",
    "postmortem": "ddpdoctor.cli.postmortem_cmd:postmortem",
    "report": "ddpdoctor.cli.report_cmd:report",
}


class LazyGroup(click.Group):
    """Loads a command's module only when that command (or the full help) is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = __import__(module_name, fromlist=[attr])
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None  # a command not built yet in this checkout
            raise
        return with_global_flags(getattr(module, attr))


def _set_verbose(ctx, param, value) -> None:
    if value:
        common.STATE.verbose = max(common.STATE.verbose, value)


def _set_quiet(ctx, param, value) -> None:
    if value:
        common.STATE.quiet = True


def with_global_flags(cmd: click.Command) -> click.Command:
    """-v/-q after the subcommand too (`ddpdoctor preflight -v`), as users type them; hidden in the
    command's help (the root's help lists them once)."""
    if not getattr(cmd, "_ddpdoctor_global_flags", False):
        cmd.params.append(click.Option(["-v", "--verbose"], count=True, expose_value=False, hidden=True,
                                       callback=_set_verbose, help="More detail, tracebacks of errors."))
        cmd.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, hidden=True,
                                       callback=_set_quiet, help="Only the verdict and failures."))
        cmd._ddpdoctor_global_flags = True
    return cmd


def _wrap_keeping_tokens(text: str, width: int = 78, initial_indent: str = "", subsequent_indent: str = "",
                         preserve_paragraphs: bool = False) -> str:
    """click's wrap_text, except that a `quoted command` and a hyphenated or dotted name
    (`--skip gpu-perf`, clock-skew.warn_ms) never break across lines: help is pasted from."""
    import re

    keep = "\x00"
    protected = re.sub(r"`[^`]*`", lambda m: m.group().replace(" ", keep), text)
    wrapped = _click_wrap_text(protected, width, initial_indent, subsequent_indent, preserve_paragraphs)
    return wrapped.replace(keep, " ")


def _no_hyphen_breaks() -> None:
    """click wraps with textwrap's default break_on_hyphens=True (`clock-` / `skew.warn_ms`); click has no
    setting for it, so its two module-level helpers are replaced in this process (the CLI's own)."""
    import click._textwrap as ctw
    import click.formatting as cf

    if getattr(cf.wrap_text, "__name__", "") == "_wrap_keeping_tokens":
        return
    global _click_wrap_text
    _click_wrap_text = cf.wrap_text
    original_init = ctw.TextWrapper.__init__

    def init(self, *args, **kwargs):
        kwargs.setdefault("break_on_hyphens", False)
        original_init(self, *args, **kwargs)

    ctw.TextWrapper.__init__ = init
    cf.wrap_text = _wrap_keeping_tokens


_click_wrap_text = None
_no_hyphen_breaks()


# auto_envvar_prefix: every option of every command is mirrored once as DDPDOCTOR_<COMMAND>_<OPTION>
# (DDPDOCTOR_PREFLIGHT_TIMEOUT=30), beside the few shared names options declare (DDPDOCTOR_MASTER, _TOKEN...).
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100,
                                              "auto_envvar_prefix": "DDPDOCTOR"})
@click.version_option(__version__, "--version", prog_name="ddpdoctor")
@click.option("-v", "--verbose", count=True, help="More detail; -v also shows tracebacks of errors.")
@click.option("-q", "--quiet", is_flag=True, help="Only the verdict and failures.")
def cli(verbose: int, quiet: bool) -> None:
    """Check a PyTorch DDP cluster before the job burns GPU hours, benchmark it, launch and explain.

    \b
    Exit codes: 0 passed (warnings allowed) · 1 a check failed · 2 usage or bad input
                3 the cluster did not assemble · 4 internal error
    """
    common.STATE.verbose = verbose
    common.STATE.quiet = quiet


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, schedulers and Ctrl-C-less tools send): unwinds like Ctrl-C, so every
    `finally` that stops child processes runs, and ends with 128 + 15."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the group under the one error policy and exits with its code."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
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


SCRIPT_HINT = ("options for your script go after `--`: ddpdoctor run-trainer [OPTIONS] -- train.py --lr 3e-4")


def run(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # `ddpdoctor` alone: the help, as git and torchrun do
        click.echo(cli.get_help(click.Context(cli, info_name="ddpdoctor")))
        return 0
    try:
        rv = cli.main(args=argv, prog_name="ddpdoctor", standalone_mode=False)
        return int(rv or 0)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Terminated:
        common.error_line("terminated (SIGTERM)")
        return 143
    except click.exceptions.Abort as exc:  # click turns KeyboardInterrupt (and so SIGTERM) into Abort
        if isinstance(exc.__cause__, Terminated):
            common.error_line("terminated (SIGTERM)")
            return 143
        common.error_line("interrupted")
        return 130
    except click.NoSuchOption as exc:
        hint = f" ({SCRIPT_HINT})" if exc.ctx is not None and exc.ctx.info_name == "run-trainer" else ""
        common.error_line(common.usage_message(exc) + hint)
        return EXIT_USAGE
    except click.ClickException as exc:
        common.error_line(exc.format_message())
        return EXIT_USAGE
    except DdpdoctorError as exc:
        if common.STATE.verbose:
            traceback.print_exc()
        common.error_line(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        common.error_line("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the policy: one line, exit 4, traceback with -v
        if common.STATE.verbose:
            traceback.print_exc()
        common.error_line(f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)")
        return EXIT_INTERNAL
