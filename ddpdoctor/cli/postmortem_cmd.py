"""`ddpdoctor postmortem DIR`: run-trainer's root-cause analysis for a job launched without ddpdoctor, from the
log dir plain torchrun wrote (`--redirects 3 --log-dir DIR`), its error files and, if saved, its stderr."""
from __future__ import annotations

from pathlib import Path

import click

from . import common


@click.command("postmortem")
@click.argument("log_dir", metavar="[DIR]", required=False, type=click.Path(file_okay=False))
@click.option("--agent-log", type=click.Path(dir_okay=False),
              help="torchrun's own stderr, if saved (its failure table names hosts and exit codes; default: "
                   "DIR/agent.stderr.log when present).")
@click.option("--fr-dir", "fr_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Where flight-recorder dumps are (torch's TORCH_FR_DUMP_TEMP_FILE files, nccl_trace_rank_<R>, or "
                   "JSON dumps rank<R>.json, any name ending in the rank); DIR itself is always searched. Without "
                   "DIR: the dumps' verdict alone.")
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
      ddpdoctor postmortem --fr-dir /shared/fr_dumps
    """
    from ..errors import UsageError
    from ..forensics.postmortem.engine import explain, explain_dumps
    from ..report.console_trainer import render

    out_dir = common.ensure_writable_dir(output_dir)
    report_file = common.ensure_writable_file(report_path)
    save = common.saving(results_dir, no_save, out_dir)
    if log_dir is None and not fr_dirs:
        raise UsageError("give the job's torchrun log dir (DIR), or --fr-dir with its flight-recorder dumps")
    if log_dir is None:
        doc = explain_dumps([Path(d) for d in fr_dirs])
    else:
        doc = explain(Path(log_dir), Path(agent_log) if agent_log else None, [Path(d) for d in fr_dirs],
                      results=Path(results_dir) if results_dir else None)  # read there even with --no-save
    return common.emit(doc, filename="postmortem.json", out_dir=out_dir, report_file=report_file, as_json=as_json,
                       render=lambda d, console: _render(d, console, render), save=save)


def _render(doc: dict, console, render) -> None:
    if doc["verdict"] == "pass":
        from ..report.console import T

        console.print(T(f"postmortem: no failed rank in {doc['logs']}", style="green"))
        if doc.get("normal_end"):
            console.print(T(f"normal end: {doc['normal_end']}", style="green"))
        for line in doc.get("input_notes") or []:
            console.print(T(f"note: {line}", style="dim"))
        return
    render(doc, console)
