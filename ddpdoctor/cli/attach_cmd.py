"""`ddpdoctor attach`: diagnose a torch.distributed job that runs (or hangs) right now on this machine, whoever
launched it, from outside: its ranks' stacks read four times with py-spy, one verdict naming rank, host and line."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

import click

from ..text import safe_text
from . import common


@click.command("attach")
@click.option("--pid", type=click.IntRange(min=1), help="A process of the job (torchrun's agent, a rank, or the "
              "srun/mpirun that started it): only it and its children are read.")
@click.option("--job", metavar="KEY", help="The job's key as attach lists it (TORCHELASTIC_RUN_ID, the scheduler's "
              "job id, or MASTER_ADDR:PORT), when several jobs run here.")
@click.option("--interval", type=click.FloatRange(min=0, max=600), default=3.0, show_default=True,
              help="Seconds over which four samples tell a stuck rank from a slow one (0: one sample).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0, max=3600), default=30.0, show_default=True,
              help="When no rank moved over the interval but a rank computes (a long step, or a hang?), keep "
              "watching up to this many seconds in all before saying which it is.")
@click.option("--timeout", type=common.TIMEOUT, default=10.0, show_default=True,
              help="Seconds each py-spy dump may take.")
@click.option("--stop", is_flag=True, help="After a hang or desync verdict, end the job (SIGTERM to torchrun's "
              "agent, else to every rank). Without it attach only reads.")
@click.option("--master", metavar="HOST:PORT", help="Several nodes: run the same command on every node (srun "
              "--overlap, pbsdsh, mpiexec, ssh); they meet here as preflight's nodes do and the master prints the "
              "one verdict.")
@click.option("--nnodes", type=click.IntRange(min=1, max=4096), help="Nodes that must join (default: the launcher's).")
@click.option("--node-rank", type=click.IntRange(min=0, max=4095), help="This node's rank (default: the launcher's, "
              "or assigned).")
@click.option("--local-addr", metavar="ADDR", help="Address this node advertises (like preflight's).")
@click.option("--token", envvar="DDPDOCTOR_TOKEN", help="Shared secret that signs every message between the nodes "
              "(as preflight's --token; without it the run's own key file when the nodes share one).")
@click.option("--meet-timeout", type=common.TIMEOUT, default=60.0, show_default=True,
              help="Seconds to wait for the nodes to meet.")
@common.output_options
@common.save_options
@common.run_id_option
def attach(pid, job, interval, wait_s, timeout, stop, master, nnodes, node_rank, local_addr, token, meet_timeout,
           as_json, output_dir, report_path, results_dir, no_save):
    """Find the torch.distributed job on this machine and say which rank holds it up, where, and what to do.

    Reads only (py-spy dump from outside, and torch's own dump pipe where the job set one: no signal, the job
    keeps running). Exit 0 the job progresses (or, verdict warn, no rank moved within --wait while a rank
    computes: a long step cannot be told from a hang), 1 a hang or desync found, 2 usage (several jobs here: pick
    one with --pid or --job), 3 nothing could be read (permission: the line says what to run).

    \b
    Examples:
      ddpdoctor attach                       # the one job on this machine
      ddpdoctor attach --pid 4242 --json     # the job torchrun 4242 runs
      sudo -E $(command -v ddpdoctor) attach # a job of another user
    """
    from ..exitcodes import ExitCode
    from ..forensics.attach.run import AttachRequest, run, run_nodes
    from ..report.console_attach import render

    out_dir = common.ensure_writable_dir(output_dir)
    report_file = common.ensure_writable_file(report_path)
    save = common.saving(results_dir, no_save, out_dir)
    request = AttachRequest(pid=pid, job=job, interval=interval, timeout=timeout, stop=stop, wait=wait_s,
                            master=master, nnodes=nnodes, node_rank=node_rank, local_addr=local_addr, token=token,
                            meet_timeout=meet_timeout)
    if request.several_nodes and stop:
        raise click.UsageError("--stop ends a job on one node; on several nodes stop it with its launcher")
    with progress_lines(quiet=as_json or common.STATE.quiet) as request.progress:
        doc = run_nodes(request) if request.several_nodes else run(request)
    if doc is None:
        return ExitCode.OK  # a second process the launcher started on this node: local rank 0 speaks for it
    return common.emit(doc, filename=result_name(doc), out_dir=out_dir, report_file=report_file, as_json=as_json,
                       render=render, save=save)


def result_name(doc: dict) -> str:
    """Where this node keeps its result in a shared run folder: attach.json for the whole job's verdict (the
    master's; one node that read every rank), attach-HOST.json for a part (a worker's, or one node's attach on a
    multi-node job), so three nodes writing one folder never leave a partial result in place of the whole."""
    from ..documents import ATTACH_WHOLE, results_dir_name

    whole = doc.get("role") == "master" or (doc.get("role") is None
                                            and not (doc.get("job") or {}).get("ranks_elsewhere"))
    return ATTACH_WHOLE if whole else f"attach-{results_dir_name(str(doc.get('host') or 'node'))}.json"


@contextmanager
def progress_lines(quiet: bool) -> Iterator[Callable[[str], None] | None]:
    """What attach is doing while it samples (the rounds, a watch and why): one live line on a terminal (rich's
    status on stderr, gone when the result prints), plain lines on stderr when it is not a terminal, nothing with
    --json or --quiet."""
    if quiet:
        yield None
        return
    if not sys.stderr.isatty():
        def plain(text: str) -> None:
            print(f"[ddpdoctor attach] {safe_text(text)}", file=sys.stderr, flush=True)
        yield plain
        return
    from rich.text import Text

    status = common.console(stderr=True).status("ddpdoctor attach: finding the job")
    with status:
        yield lambda text: status.update(Text(f"ddpdoctor attach: {safe_text(text)}"))
