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
from pathlib import Path

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
      PrologFlags=Alloc
      HealthCheckProgram=/opt/ddpdoctor/bin/ddpdoctor-slurm-check
      HealthCheckInterval=300
    \b
    Examples:
      ddpdoctor node-check --dry-run           # on a node, by hand: the checks, and what it would do in SLURM
      SLURMD_NODENAME=node7 ddpdoctor-slurm-check --dry-run   # as node7's health check, acting on nothing
    """
    from ..unattended import node_check as engine, site

    started = STARTED if STARTED is not None else time.monotonic()
    cfg = site.load(config_path or site.config_path()[0])
    at = engine.where(os.environ)
    engine.refuse_odd_name(at)
    if at.under_slurm:  # scontrol runs only under SLURM
        engine.refuse_untrusted(cfg, os.environ)
    doc = engine.run_checks(cfg, started)
    state = engine.node_state(at, cfg, os.environ)
    decision = engine.decide(engine.findings_that_drain(doc, cfg.drain_on), state, drain_on=cfg.drain_on)
    done = {"dry_run": True} if dry_run and decision.action in ("drain", "resume") else \
        engine.act(decision, at, cfg, os.environ)
    engine.record(doc, at, cfg, decision, state, done, time.monotonic() - started)
    _keep(doc, at, cfg)
    if cfg.prometheus_textfile:
        from . import monitoring

        monitoring.write_prometheus(doc, Path(cfg.prometheus_textfile), "node-check")
    if as_json:
        common.print_json(doc)
    elif not common.STATE.quiet:
        click.echo(summary_line(doc, at, decision, done))
    if at.context in (engine.PROLOG, engine.EPILOG):
        return ExitCode.FAIL if decision.fails else ExitCode.OK
    return doc["exit_code"]


def _keep(doc: dict, at, cfg) -> None:
    from ..errors import UsageError
    from ..unattended import node_check as engine

    try:
        common.say_wrote("result", engine.keep(doc, engine.result_path(cfg, at, doc["created"]), cfg.keep))
    except UsageError as exc:
        common.warn_line(f"record not kept: {exc} (results_dir in the site config)")


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
    code = run(["node-check", *sys.argv[1:]])
    if where(os.environ).under_slurm and code not in (ExitCode.OK, ExitCode.FAIL):
        print(f"ddpdoctor-slurm-check: the check itself failed (exit {code}, above): the node is neither drained "
              "nor the job failed for it", file=sys.stderr)
        code = ExitCode.OK
    _exit(code)
