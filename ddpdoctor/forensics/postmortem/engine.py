"""`ddpdoctor postmortem`'s engine: a torchrun log dir (with torchrun's output and flight-recorder dumps, when
given) -> the run-trainer-shaped document: the root cause, its consequences, and "pass" only on evidence of a
normal end. Reading the inputs (which folder, which files) is here too; the command keeps options and rendering."""
from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from ... import documents
from ...errors import UsageError
from ...exitcodes import ExitCode
from ...numbers import parse_int
from ..evidence import ending, job_files, scheduler_end, user_code
from ..evidence.fr_dumps import find_dumps, pg_timeouts_s, stalled_s
from ..judge.decide import ATTACH_SAVED, Context, Evidence, Failures, decide
from ..judge.dumps import judge_dumps
from ..judge.verdict import Findings
from . import analysis, known
from .node_folders import rdzv_id_of
from ..judge.end_rules import STACKS
from .trainer_run import kept_sizes, sigterm_stacks


def explain(log_dir: Path, agent_log: Path | None, fr_dirs: list[Path], results: Path | None = None) -> dict:
    """The postmortem document of the job whose torchrun log dir is ``log_dir`` (checked: log_root). ``results``:
    where ddpdoctor keeps results (--results-dir): what it already knew of this job there is evidence (known)."""
    logs = log_root(log_dir)
    run_id = job_run_id(logs)
    agent_text = read_agent_log(agent_log or logs / "agent.stderr.log", required=agent_log is not None)
    user_code.declare(*analysis.entry_point(agent_text))  # its package is the user's code, wherever installed
    # Reads stay under the log dir's parent (a shared run dir holds every node's logs side by side) or a
    # --fr-dir given; every read is bounded and a file that is not a regular one is a note (job_files).
    with job_files.reading(logs.parent) as notes:
        verdict = analysis.analyse(logs, agent_text, socket.gethostname())
    run_dir = logs.parent.parent  # a run-trainer run's: <run>/logs/<node>, its records beside
    own = run_records(logs)
    job_folders = known.folders_of(results, run_id, run_dir)  # the job's results folder (its run id's), its run dir
    # the dumps there are this job's too: run-trainer's nccl_trace_rank_<R> and its ranks' records at exit
    fr_roots = outermost([log_dir, *map(fr_dir, fr_dirs), *(f for f in job_folders if f.is_dir()),
                          *([own / "flight_recorder"] if own else [])])
    with job_files.reading(fr_roots) as fr_notes:
        dumps = find_dumps(fr_roots)
        hang = judge_dumps(dumps, verdict.failures, own / STACKS if own else None, verdict.world)
    ranks = sorted(set(verdict.world) | set(last_attempt_ranks(logs, verdict)))
    with job_files.reading(run_dir):  # a run-trainer run's own records, never a plain log dir's parent folder
        mismatch = kept_sizes(own) if own else None
        stacks = sigterm_stacks(own) if own else frozenset()
        normal = ("torchrun's output: its worker group SUCCEEDED" if ending.agent_succeeded(agent_text) else
                  "every rank's record at exit: exit code 0"
                  if own and ending.ranks_ended_normally(own / "flight_recorder", ranks) else None)
    if normal is None and not verdict.failures:  # torchrun and srun say nothing of a normal end by default
        normal = scheduler_said(logs, run_id, notes)
    attached = None if normal else attach_saved(logs, run_id, job_folders, notes)
    evidence = Evidence(dumps=hang, sizes=mismatch, stalled_s=stalled_s(dumps), timeouts=tuple(pg_timeouts_s(dumps)),
                        stop_signal=verdict.stopped_by, ranks=tuple(ranks), stacks=stacks, attached=attached)
    outcome = decide(evidence, Failures(findings=verdict), Context("postmortem", normal_end=bool(normal)))
    record = outcome.record
    adopted = ATTACH_SAVED in outcome.evidence  # the Outcome's own evidence: attach's saved verdict named the cause
    return documents.envelope(
        "run-trainer", run_id=run_id,
        config={"source": "postmortem", "log_dir": str(logs), "agent_log": str(agent_log) if agent_log else None},
        verdict=outcome.verdict, exit_code=outcome.exit_code(), outcome=outcome.to_json(),
        start=None, interrupted=None, torchrun_exit_code=None,
        restarts=max(0, len(verdict.attempts) - 1), attempts=verdict.attempts, wall_s=None, metrics={},
        metrics_summary={}, checksums_equal=None,
        root_cause=record.root,
        consequences=list(record.consequences),
        culprit_ranks=list(record.culprit_ranks),
        normal_end=normal if outcome.verdict == "pass" else None,
        hang=({"verdict": attached.diagnosis, "source": str(attached.path)} if adopted else
              {"verdict": hang.to_json()} if hang and outcome.verdict == "fail" else None),
        logs=str(logs), input_notes=notes + fr_notes,
        preflight=None)


def outermost(roots: list[Path]) -> list[Path]:
    """The folders to search, each once: a folder inside another one given is searched with it (a run-trainer
    run's folder holds its logs and its flight_recorder/)."""
    full = list(dict.fromkeys(p.absolute() for p in roots))
    return [p for p in full if not any(o != p and o in p.parents for o in full)]


def run_records(logs: Path) -> Path | None:
    """The run-trainer run whose logs these are (its layout: ``<run>/logs/<node>`` with ``<run>/flight_recorder``,
    run.json too unless run-trainer itself was killed): its flight records written at exit or at the SIGTERM, its
    SIGTERM stacks and kept sizes are this job's own evidence. None for any other folder: a plain torchrun log
    dir's parent holds other things (another job's records, the temporary folder)."""
    run = logs.parent.parent
    if logs.parent.name != "logs" or not (run / "flight_recorder").is_dir():
        return None
    return run


def scheduler_said(logs: Path, run_id: str, notes: list[str]) -> str | None:
    """SLURM's record that this job ended normally (COMPLETED, exit code 0:0), in words; else None. Asked only for
    a run id the job or the user gave (--run-id, the scheduler's job id, the log dir's rendezvous id), never for
    one made up here (job_run_id's new id may be all digits)."""
    mine = analysis.attempts(logs)
    given = {os.environ.get(v, "").strip() for v in documents.RUN_ID_VARS} | {rdzv_id_of(p.parent) for p in mine}
    if not mine or run_id not in given:
        return None
    try:
        owner = os.stat(mine[-1].parent).st_uid
    except OSError:
        return None
    end = scheduler_end.job_end(run_id, job_files.mtime(mine[-1]), owner, notes)
    if end is not None and not end.normal:
        notes.append(end.said())  # not a normal end: what the scheduler says, beside what the logs show
    return end.said() if end is not None and end.normal else None


def attach_saved(logs: Path, run_id: str, folders: list[Path], notes: list[str]):
    """attach's verdict on this job, saved in its results folder while it hung (known.attach_verdict: this job's
    run, after its last attempt started, a file the reader may trust), or None. decide() makes its rank the root
    cause where the logs name none."""
    rdzv = {rdzv_id_of(p.parent) for p in logs.glob("*/attempt_*")} - {None}
    mine = analysis.attempts(logs)
    return known.attach_verdict(folders, run_id, rdzv, job_files.mtime(mine[-1]) if mine else None, notes)


def explain_dumps(fr_dirs: list[Path]) -> dict:
    """`postmortem --fr-dir DIR` without a log dir: the flight-recorder dumps alone, decided as every job is
    (judge/decide.py: the rank they name fails; dumps that name none are "not verified", a dump says nothing of
    how the job ended); no dump at all is a usage error."""
    roots = [fr_dir(p) for p in fr_dirs]
    with job_files.reading(roots) as notes:
        dumps = find_dumps(roots)
        hang = judge_dumps(dumps) if dumps else None
    if not dumps:
        raise UsageError(f"--fr-dir {', '.join(map(str, fr_dirs))}: no flight-recorder dump found (torch's "
                         "TORCH_FR_DUMP_TEMP_FILE files, nccl_trace_rank_<R>, rank<R>.json)")
    outcome = decide(Evidence(dumps=hang, ranks=tuple(sorted(dumps))), Failures(findings=Findings(root_cause=None)),
                     Context("postmortem", logs=False))
    record = outcome.record
    return documents.envelope(
        "run-trainer", run_id=documents.new_run_id(),
        config={"source": "postmortem", "log_dir": None, "agent_log": None, "fr_dirs": [str(p) for p in roots]},
        verdict=outcome.verdict, exit_code=outcome.exit_code(), outcome=outcome.to_json(),
        start=None, interrupted=None, torchrun_exit_code=None, restarts=0, attempts=[], wall_s=None, metrics={},
        metrics_summary={}, checksums_equal=None, root_cause=record.root, consequences=list(record.consequences),
        culprit_ranks=list(record.culprit_ranks), hang={"verdict": hang.to_json()} if hang else None, logs=None,
        input_notes=notes, preflight=None)


def last_attempt_ranks(logs: Path, verdict) -> list[int]:
    """The ranks whose logs the last attempt of each node holds (the ranks a normal end must account for)."""
    mine = analysis.attempts(logs)[-1:]
    others = [attempt for _, attempt in analysis.other_nodes(logs)]
    ranks = {r for attempt in mine + others for r in analysis.attempt_ranks(attempt, verdict.failures)}
    if not ranks and mine:  # plain torchrun keeps no rank's env: its local rank folders (every node's, when they
        # share the log dir: the job's ranks are 0 .. their number - 1)
        count = sum(1 for attempt in mine + others for d in job_files.subdirs(attempt)
                    if parse_int(d.name, hi=1 << 20) is not None)
        ranks = set(range(count))
    return sorted(ranks)


def job_run_id(logs: Path) -> str:
    """The run id the result is kept under: --run-id or the scheduler's job id (documents.new_run_id), else
    the job's own torchrun id, from its folder `<rdzv id>_<suffix>` (torchrun's default id "none" is none),
    so a postmortem of one job lands beside that job's other results; else a new one."""
    from ...inputs import check_run_id

    if any(os.environ.get(v, "").strip() for v in documents.RUN_ID_VARS):  # --run-id, a scheduler's job id
        return documents.new_run_id()
    ids = sorted({rdzv_id_of(p.parent) for p in logs.glob("*/attempt_*")} - {None})
    if len(ids) == 1 and ids[0] != "none":
        try:
            check_run_id(ids[0], "the log dir")
            return ids[0]
        except UsageError:
            pass
    return documents.new_run_id()


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


def fr_dir(path: Path) -> Path:
    """A --fr-dir must be a directory: a mistyped one would silently leave the verdict without its dumps."""
    try:
        if path.is_dir():
            return path
    except OSError:
        pass
    raise UsageError(f"--fr-dir {path}: no such directory")


def read_agent_log(path: Path, required: bool) -> str:
    """torchrun's saved stderr: its last 4 MiB (job_files.AGENT_LOG_BYTES), a regular file only (a FIFO
    would block the read forever)."""
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
    return analysis.tail(path, lines=2000, max_bytes=job_files.AGENT_LOG_BYTES, keep_prefix=True)
