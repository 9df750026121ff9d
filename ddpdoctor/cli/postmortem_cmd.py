"""`ddpdoctor postmortem DIR`: run-trainer's root-cause analysis for a job launched without ddpdoctor, from the
log dir plain torchrun wrote (`--redirects 3 --log-dir DIR`), its error files and, if saved, its stderr."""
from __future__ import annotations

import socket
from pathlib import Path

import click

from ..errors import UsageError
from ..exitcodes import ExitCode
from ..forensics.evidence.fr_dumps import find_dumps, stalled_s
from ..forensics.judge.dumps import judge_dumps
from . import common


@click.command("postmortem")
@click.argument("log_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--agent-log", type=click.Path(dir_okay=False),
              help="torchrun's own stderr, if saved (its failure table names hosts and exit codes; default: "
                   "DIR/agent.stderr.log when present).")
@click.option("--fr-dir", "fr_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Where flight-recorder dumps are (torch's TORCH_FR_DUMP_TEMP_FILE files, nccl_trace_rank_<R>, or "
                   "JSON dumps rank<R>.json); DIR itself is always searched.")
@common.output_options
@common.save_options
@common.run_id_option
def postmortem(log_dir, agent_log, fr_dirs, as_json, output_dir, report_path, results_dir, no_save):
    """Explain a failed torchrun job from its log dir: the root-cause rank, why, where, and the consequences.

    The result is kept in ddpdoctor-results/RUN_ID/postmortem.json (RUN_ID: --run-id, the scheduler's job id,
    else torchrun's --rdzv-id from the log dir), as every command keeps its own.

    \b
    Examples:
      torchrun --nproc-per-node 8 --redirects 3 --log-dir logs train.py; ddpdoctor postmortem logs
      ddpdoctor postmortem logs --agent-log torchrun.stderr --json
    """
    from .. import documents
    from ..forensics.evidence import job_files
    from ..forensics.postmortem import analysis as pm
    from ..launch.outcome import stacks_on_file
    from ..report.console_trainer import render

    out_dir = common.ensure_writable_dir(output_dir)
    report_file = common.ensure_writable_file(report_path)
    save = common.saving(results_dir, no_save, out_dir)
    logs = log_root(Path(log_dir))
    agent_text = read_agent_log(Path(agent_log) if agent_log else logs / "agent.stderr.log", required=bool(agent_log))
    # Reads stay under the log dir's parent (a shared run dir holds every node's logs side by side) or a
    # --fr-dir given; every read is bounded and a file that is not a regular one is a note (evidence_io).
    with job_files.reading(logs.parent) as notes:
        verdict = pm.analyse(logs, agent_text, socket.gethostname())
    fr_roots = [Path(log_dir), *map(fr_dir, fr_dirs)]
    with job_files.reading(fr_roots) as fr_notes:
        dumps = find_dumps(fr_roots)
        hang = judge_dumps(dumps, verdict.failures, None, verdict.world)
    pm.adopt_hang_verdict(verdict, hang)
    from ..forensics.judge.stopped import stopped_from_outside

    stopped_from_outside(verdict, hang, stalled_s(dumps), verdict.stopped_by)  # a hung job a scheduler ended
    failed = verdict.root_cause is not None
    root = verdict.root_cause.to_json() if failed else None
    stacks_on_file(root, logs.parent.parent / "stacks" / "sigterm")  # a run-trainer run's: <run>/logs/<node>
    doc = documents.envelope(
        "run-trainer", run_id=job_run_id(logs),
        config={"source": "postmortem", "log_dir": str(logs), "agent_log": agent_log},
        verdict="fail" if failed else "pass",
        exit_code=ExitCode.FAIL if failed else ExitCode.OK,
        start=None, interrupted=None, torchrun_exit_code=None,
        restarts=max(0, len(verdict.attempts) - 1), attempts=verdict.attempts, wall_s=None, metrics={},
        metrics_summary={}, checksums_equal=None,
        root_cause=root,
        consequences=[f.to_json() for f in verdict.consequences] if failed else [],
        culprit_ranks=culprit_ranks(verdict) if failed else [],
        hang={"verdict": hang} if hang and failed else None, logs=str(logs), input_notes=notes + fr_notes,
        preflight=None)
    return common.emit(doc, filename="postmortem.json", out_dir=out_dir, report_file=report_file, as_json=as_json,
                       render=lambda d, console: _render(d, console, render), save=save)


def job_run_id(logs: Path) -> str:
    """The run id the result is kept under: --run-id or the scheduler's job id (documents.new_run_id), else
    the job's own torchrun id, from its folder `<rdzv id>_<suffix>` (torchrun's default id "none" is none),
    so a postmortem of one job lands beside that job's other results; else a new one."""
    import os

    from ..documents import RUN_ID_VARS, new_run_id
    from ..inputs import check_run_id

    if any(os.environ.get(v, "").strip() for v in RUN_ID_VARS):
        return new_run_id()
    # torch names each run's folder mkdtemp(prefix=f"{rdzv_id}_"): the id, "_", 8 random characters
    ids = sorted({p.parent.name[:-9] for p in logs.glob("*/attempt_*") if len(p.parent.name) > 9
                  and p.parent.name[-9] == "_"})
    if len(ids) == 1 and ids[0] != "none":
        try:
            check_run_id(ids[0], "the log dir")
            return ids[0]
        except UsageError:
            pass
    return new_run_id()


def culprit_ranks(verdict) -> list[int]:
    from ..forensics.judge.attribution import culprit_ranks as ranks

    return ranks(verdict.root_cause.to_json() if verdict.root_cause else None, [f.to_json() for f in verdict.consequences])


def log_root(path: Path) -> Path:
    """The directory holding torchrun's `<run id>_<suffix>/attempt_<k>/` folders: DIR itself, or DIR's parent
    when DIR is one run's folder. Anything else is a usage error naming the path."""
    try:
        if not path.is_dir():
            raise UsageError(f"{path}: not a directory")
        if any(path.glob("attempt_*")):
            return path.parent
        if any(p.is_dir() for p in path.glob("*/attempt_*")):
            return path
    except PermissionError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from exc
    raise UsageError(f"{path}: no torchrun log dir (expected <run id>_*/attempt_<k>/<local rank>/ from "
                     "torchrun --redirects 3 --log-dir)")


def fr_dir(text: str) -> Path:
    """A --fr-dir must be a directory: a mistyped one would silently leave the verdict without its dumps."""
    path = Path(text)
    try:
        if path.is_dir():
            return path
    except OSError:
        pass
    raise UsageError(f"--fr-dir {path}: no such directory")


def read_agent_log(path: Path, required: bool) -> str:
    """torchrun's saved stderr: its last 4 MiB (job_files.AGENT_LOG_BYTES), a regular file only (a FIFO
    would block the read forever)."""
    import os
    import stat

    from ..forensics.evidence.job_files import AGENT_LOG_BYTES
    from ..forensics.postmortem.analysis import tail

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        if required:
            raise UsageError(f"--agent-log {path}: no such file") from None
        return ""
    if not stat.S_ISREG(mode):
        if required:
            raise UsageError(f"--agent-log {path}: not a regular file (a FIFO, a device or a directory)")
        return ""
    return tail(path, lines=2000, max_bytes=AGENT_LOG_BYTES)


def _render(doc: dict, console, render) -> None:
    if doc["verdict"] == "pass":
        from ..report.console import T

        console.print(T(f"postmortem: no failed rank in {doc['logs']}", style="green"))
        for line in doc.get("input_notes") or []:
            console.print(T(f"note: {line}", style="dim"))
        return
    render(doc, console)
