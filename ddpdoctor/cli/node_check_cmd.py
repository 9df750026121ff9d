"""`ddpdoctor-slurm-check` (also `ddpdoctor node-check`): the unattended node check, as slurm.conf names a program
(a path, no arguments) for Prolog=, Epilog= and HealthCheckProgram=; it tells which from SLURM's environment.

Exit codes: in a prolog or epilog, 1 when the node fails (SLURM then requeues the job; the node is already drained
with ddpdoctor's reason), else 0; a health check or a person's run: the verdict's code (0 pass, 1 fail). A failure
of the tool itself (a bad site config, a bug) under SLURM is one line on stderr (slurmd's log where it keeps the
script's output) and exits 0: it never drains a node nor fails a job.
"""
from __future__ import annotations

import os
import sys
import time

import click

from ..exitcodes import ExitCode
from . import common


STARTED: float | None = None  # the console script's process start (main); else the budget counts from the command's


def _process_start() -> float:
    """When this process started, on the monotonic clock: the budget counts the interpreter's start and the
    imports before the command too (seconds on a loaded node), as SLURM's 60 s limit does."""
    try:
        import psutil

        return time.monotonic() - max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no psutil or no /proc: from here, a little late
        return time.monotonic()


@click.command("node-check")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="DDPDOCTOR_CONFIG",
              help="The site config (default: $DDPDOCTOR_CONFIG, else /etc/ddpdoctor/ddpdoctor.toml if it exists).")
@click.option("--dry-run", is_flag=True, help="Decide, but drain or resume nothing (the line says what it would do).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's record (a preflight document) on stdout.")
def node_check(config_path, dry_run, as_json):
    """Check this node unattended and drain it in SLURM when it fails (resume it when a drain ddpdoctor wrote passes).

    \b
    slurm.conf (no arguments: the site config is /etc/ddpdoctor/ddpdoctor.toml):
      Prolog=/opt/ddpdoctor/bin/ddpdoctor-slurm-check
      Epilog=/opt/ddpdoctor/bin/ddpdoctor-slurm-check
      PrologFlags=Alloc,DeferBatch
      SchedulerParameters=nohold_on_prolog_fail
      HealthCheckProgram=/opt/ddpdoctor/bin/ddpdoctor-slurm-check
      HealthCheckInterval=300
    \b
    Examples:
      ddpdoctor node-check --dry-run           # on a node, by hand: the checks, and what it would do in SLURM
      SLURMD_NODENAME=node7 ddpdoctor-slurm-check --dry-run   # as node7's health check, acting on nothing
    """
    from ..unattended.entry import run

    out = run(config_path, dry_run=dry_run, started=STARTED, hard_exit=STARTED is not None, carried=unkept_before)
    for note in out.notes:
        common.warn_line(note)
    if out.written is not None:
        common.say_wrote("result", out.written)
    if out.site.prometheus_textfile:
        _prometheus(out.doc, out.site.prometheus_textfile)
    if as_json:
        common.print_json(out.doc)
    elif not common.STATE.quiet:
        click.echo(summary_line(out.doc, out.at, out.decision, out.done))
    return out.exit_code


def unkept_before(cfg) -> dict:
    """The records the node check could not keep since the last one kept, as the previous run left them in the
    Prometheus textfile (results_dir is what failed: the textfile is the only place left to carry them)."""
    from ..report import prometheus

    if not cfg.prometheus_textfile:
        return {}
    return prometheus.unkept_in(prometheus.previous(cfg.prometheus_textfile, "node-check"))


def _prometheus(doc: dict, directory: str) -> None:
    """The node's series (report/prometheus.node_check_samples: no job label, one series across jobs)."""
    from ..errors import UsageError
    from ..report import prometheus

    def series(old: list) -> dict:
        out = {"node-check": prometheus.node_check_samples(prometheus.recount_unkept(doc, old))}
        before = [s for s in old if s[1].get("command") == prometheus.MEETING_COMMAND]
        meeting = prometheus.meeting_samples(doc, before=before)
        if meeting:  # a prolog that met or should have: its series replace the last meeting's
            out[prometheus.MEETING_COMMAND] = meeting
        return out

    try:
        common.say_wrote("metrics", prometheus.update(directory, series))  # one write, under the lock
    except OSError as exc:  # the lock held past its bounded wait (TimeoutError) included
        common.warn_line(f"prometheus_textfile {directory}: not written ({exc.strerror or exc}); the verdict stands")
    except UsageError as exc:  # as root, a directory another user can write: refused
        common.warn_line(f"prometheus_textfile {directory}: not written: {exc}; the verdict stands")


def summary_line(doc: dict, at, decision, done: dict) -> str:
    """One line for slurmd's log or a person: where, the verdict, the first finding, what was done."""
    from ..text import safe_text

    job = f", job {at.job_id}" if at.job_id else ""
    first = next((r for r in doc.get("results", []) if r.get("level") in ("fail", "warn")), None)
    finding = f" {first['check']}: {first['summary']}" if first else ""
    did = {"drain": f"drained ({decision.reason})", "resume": "resumed", "keep": "stays drained",
           "leave": decision.why, "unread": decision.why, "none": "nothing to do"}[decision.action]
    if done.get("dry_run"):
        did = f"dry run: would have {did}"
    elif done and not done.get("ok", True):
        did = f"could not {decision.action}: {done.get('error')}"
    return safe_text(f"ddpdoctor node check on {at.node} ({at.context}{job}): {doc.get('verdict', '?').upper()}"
                     f"{finding}; {did}")


def main() -> None:
    """The console script: the CLI's error policy, except that under SLURM the tool's own failure exits 0."""
    import signal

    global STARTED
    STARTED = _process_start()
    from . import _exit, _on_sigterm, run
    from ..unattended.node_check import where

    signal.signal(signal.SIGTERM, _on_sigterm)  # slurmd's PrologEpilogTimeout: the same clean end as ddpdoctor's
    try:
        code = run(["node-check", *sys.argv[1:]])
    finally:
        STARTED = None  # only this process's own run is bounded from its start (and its watchdog armed)
    if where(os.environ).under_slurm and code not in (ExitCode.OK, ExitCode.FAIL):
        print(f"ddpdoctor-slurm-check: the check itself failed (exit {code}, above): the node is neither drained "
              "nor the job failed for it", file=sys.stderr)
        code = ExitCode.OK
    _exit(code)
