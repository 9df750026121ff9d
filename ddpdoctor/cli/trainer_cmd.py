"""`ddpdoctor run-trainer`: preflight gate, then torchrun with error files and per-rank logs, then the root cause."""
from __future__ import annotations

import shlex
from pathlib import Path

import click

from ..errors import UsageError
from ..exitcodes import ExitCode
from ..inputs import MAX_NODES
from . import common


@click.command("run-trainer", context_settings={"ignore_unknown_options": False})
@click.option("--nnodes", type=click.IntRange(min=1, max=MAX_NODES), default=1, show_default=True, envvar="DDPDOCTOR_NNODES",
              help="Nodes in the job; run the same command on each (torchrun --nnodes).")
@click.option("--nproc-per-node", type=click.IntRange(min=1, max=1024), default=1, show_default=True,
              envvar="DDPDOCTOR_NPROC_PER_NODE", help="Processes (ranks) on this node; one per GPU usually.")
@click.option("--master", metavar="HOST:PORT", envvar="DDPDOCTOR_MASTER",
              help="c10d rendezvous endpoint, the same on every node (needed with --nnodes > 1).")
@click.option("--local-addr", metavar="ADDR", help="Address this node's agent advertises (torchrun --local-addr).")
@click.option("--max-restarts", type=click.IntRange(min=0, max=1000), default=0, show_default=True,
              envvar="DDPDOCTOR_MAX_RESTARTS", help="Restarts of the whole job after a failure (torchrun --max-restarts).")
@click.option("--run-dir", "--results-dir", "run_dir", default=common.RESULTS_DIR, show_default=True,
              envvar=["DDPDOCTOR_RUN_DIR", "DDPDOCTOR_RESULTS_DIR"],
              help="Runs go in RUN_DIR/RUN_ID/ (beside preflight's and nccl-bench's results of the same run id): "
                   "logs, error files, snapshots, metrics and run.json.")
@click.option("--rdzv-id", "--run-id", "rdzv_id", metavar="RUN_ID",
              help="This run's id, the same on every node: the rendezvous id and the records' directory "
                   "(default: $SLURM_JOB_ID or $PBS_JOBID; else new on one node, derived from --master on several).")
@click.option("--resume", metavar="RUN_ID|latest", is_flag=False, flag_value="latest", default=None,
              help="Start from an earlier run's snapshot (reference trainer; alone: the latest run's).")
@click.option("--hang-timeout", type=float, envvar="DDPDOCTOR_HANG_TIMEOUT",
              help="No rank progressing for this many seconds: dump stacks, name the rank behind, stop the job.")
@click.option("--busy-timeout", type=float, envvar="DDPDOCTOR_BUSY_TIMEOUT",
              help="Ranks waiting this many seconds for a rank busy in its own code (its CPU or stack moving): "
                   "stop the job (default: only the process group's own timeout does).")
@click.option("--steps", type=click.IntRange(min=1, max=10**9), help="Reference trainer: optimizer steps (same as -- --steps N).")
@click.option("--no-preflight", is_flag=True, help="Launch without running the preflight first.")
@click.option("--force", is_flag=True, help="Launch even when the preflight fails.")
@click.option("--preflight-args", default="", help="Extra arguments for the preflight, e.g. \"--skip gpu-perf\".")
@common.output_options
@click.argument("script_and_args", nargs=-1, type=click.UNPROCESSED)
def run_trainer(nnodes, nproc_per_node, master, local_addr, max_restarts, run_dir, rdzv_id, resume, hang_timeout,
                busy_timeout, steps,
                no_preflight, force, preflight_args, as_json, output_dir, report_path, script_and_args):
    """Run the reference DDP trainer (or `-- your_script.py args`, `-- -m package.module args`) under torchrun,
    then explain any failure. To see a diagnosis, make the reference trainer fail (its options go after `--`): `--fail-at-step K` `--fail-rank R`
    `--fail-mode exception|exit|sigkill|hang` (`--fail-attempt N`: only on that restart attempt).

    \b
    Examples:
      ddpdoctor run-trainer --nproc-per-node 2 --steps 50
      ddpdoctor run-trainer --nproc-per-node 2 --steps 20 -- --fail-at-step 5 --fail-rank 1 --fail-mode hang
      ddpdoctor run-trainer --nnodes 2 --nproc-per-node 8 --master node0:29500 -- train.py --lr 3e-4
    """
    from ..launch.config import TrainerConfig, validate
    from ..launch.gate import run_preflight
    from .preflight import request_from_args
    from ..report.console_trainer import render, render_node_line
    from ..launch.run import launch

    out_dir = common.ensure_writable_dir(output_dir)
    report_file = common.ensure_writable_file(report_path)
    script, module, args = what_to_run(list(script_and_args), steps)
    try:
        extra_preflight = shlex.split(preflight_args)
    except ValueError as exc:
        raise UsageError(f"--preflight-args: {exc}") from exc
    request = request_from_args(extra_preflight)  # a wrong flag is a usage error now, not after a launch
    cfg = validate(TrainerConfig(nnodes=nnodes, nproc_per_node=nproc_per_node, master=master, local_addr=local_addr,
                                 max_restarts=max_restarts, run_dir=run_dir, run_id=rdzv_id, resume=resume,
                                 hang_timeout=hang_timeout, busy_timeout=busy_timeout,
                                 preflight="skipped" if no_preflight else "ran", preflight_args=extra_preflight,
                                 script=script, module=module, script_args=args))
    pre = pre_doc = None
    if not no_preflight:
        pre = run_preflight(cfg, request, show=None if as_json or common.STATE.quiet else show_preflight)
        pre_doc = pre.pop("document")
        if pre["verdict"] == "fail":
            if not force:
                from ..launch.config import RECORDS

                # kept for `ddpdoctor report` under the run's id, unless that id holds an earlier run's records
                fresh = not any((cfg.records() / name).exists() for name in RECORDS)
                keep_preflight(pre_doc, cfg.records() if fresh else None, cfg.run_id)
                common.error_line("the preflight failed (see above): not launching; fix it, or pass --force"
                                  if pre.get("verified", True) else
                                  "the preflight's verdict could not be verified (this node has no key or token: "
                                  "NOT VERIFIED above): not launching; set DDPDOCTOR_TOKEN on every node, or pass "
                                  "--force")
                return ExitCode.FAIL
            cfg.preflight = "forced"
    doc = launch(cfg, echo=not common.STATE.quiet, stdout_to_stderr=as_json, preflight=pre,
                 fold=not common.STATE.verbose)  # -v: the ranks' tracebacks whole

    keep_preflight(pre_doc, Path(doc["run_json"]).parent if doc.get("run_json") else None, doc.get("run_id"))
    # A full --run-dir: the result and its post-mortem are shown first (and go to --output/--report where
    # those fit), then one line names what could not be written and the free space there; the job's exit
    # code stands (a full disk never changes a verdict).
    return common.emit(doc, filename="run.json", out_dir=out_dir, report_file=report_file, as_json=as_json,
                       render=lambda d, con: shown(d, con, render, render_node_line),
                       unwritten=list(doc.get("unwritten") or []))


def keep_preflight(pre_doc: dict | None, directory: Path | None, run_id: str | None) -> None:
    """The preflight this run ran first, in the run's directory under its id (beside run.json), so `ddpdoctor
    report` (the latest run) shows both. Written before the result is shown: the verdict stays the last word.
    A directory that cannot take it (a full disk) is one warning line; the run's own verdict stands."""
    if not pre_doc or directory is None:
        return
    from .. import documents
    from .preflight import result_filename

    try:
        documents.dump(dict(pre_doc, run_id=run_id), directory / result_filename(pre_doc))
    except UsageError as exc:
        common.warn_line(f"the preflight's result not saved: {exc}")


def what_to_run(args: list[str], steps: int | None) -> tuple[str | None, str | None, list[str]]:
    """(script, module, its arguments) from what follows ``--``: a .py script, -m MODULE, or the reference
    trainer's own options (``--steps`` is the reference trainer's only)."""
    script = module = None
    if args and args[0].endswith(".py"):
        script, args = args[0], args[1:]
    elif args and args[0] == "-m":
        if len(args) < 2:
            raise UsageError("-m: expected a module name after it, e.g. -- -m package.train")
        module, args = args[1], args[2:]
    elif args and not args[0].startswith("-"):
        raise UsageError(f"{args[0]!r}: expected a Python script (.py), -m MODULE, or trainer options after --")
    if steps is not None:
        if script or module:
            raise UsageError("--steps is the reference trainer's; pass your script's own options after it")
        args = ["--steps", str(steps), *args]
    return script, module, args


def show_preflight(doc: dict) -> None:
    """The gate's preflight on stderr: one summary per cluster, the master's (srun merges outputs)."""
    from ..report.console import render_preflight, render_worker_line, stderr_console

    if doc.get("role") == "worker":
        render_worker_line(doc, stderr_console(), hints=False)
    else:
        render_preflight(doc, stderr_console(), verbose=0, quiet=True, shown_by="with `ddpdoctor preflight`")


def shown(doc: dict, console, full, one_line) -> None:
    """One full result per cluster: node rank 0 prints it; every other node one line (unless -v), so a launcher
    that merges the nodes' output (srun) shows it once. A node that does not know its node rank (no worker
    started: the rendezvous failed) prints its full result. --json is unchanged: every node's whole document."""
    rank = (doc.get("node") or {}).get("node_rank")
    if rank and not common.STATE.verbose:
        one_line(doc, console)
    else:
        full(doc, console)
