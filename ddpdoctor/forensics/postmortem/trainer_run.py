"""run-trainer's end gathered: what a job run-trainer ran left (its logs analysed, the flight records the ranks
wrote at exit or at the launcher's SIGTERM judged, the kept call sizes, the SIGTERM stacks), the watchdog's report
and the stop on request, as the evidence judge/decide.py decides on. Nothing is decided here."""
from __future__ import annotations

import socket
from pathlib import Path

from ..evidence import job_files
from ..judge.decide import Context, Evidence, Failures
from ..judge.dumps import Judged
from ..judge.end_rules import STACKS
from ..judge.verdict import Findings
from . import analysis

MAX_STACKS = 4096  # rank stack files read at most (a folder the job filled)


def gather(code: int, agent_stderr: str, logs: Path, run_dir: Path, hang_report: dict | None,
           interrupted: int | None) -> tuple[Evidence, Failures, Context, list[str]]:
    """``code``: torchrun's exit code (0: every worker succeeded, the evidence of a normal end); ``hang_report``:
    the watchdog's, when it stopped the job; ``interrupted``: the signal run-trainer itself received. Returns the
    evidence, the failures as the logs hold them, the context, and the notes on files that could not be read."""
    with job_files.reading(run_dir) as notes:  # the run's records: every node's logs, the flight-recorder dumps
        findings = analysis.analyse(logs, agent_stderr, socket.gethostname())
        # after the watchdog's stop the dumps show the stop, not the hang it judged live
        read = hang_report is None and (code != 0 or interrupted is not None)
        judged, stalled, timeouts = exit_dumps(findings, run_dir) if read else (None, None, ())
        mismatch = kept_sizes(run_dir) if hang_report is None and code != 0 and not interrupted else None
        failed = code != 0 or hang_report is not None or interrupted is not None
        stacks = sigterm_stacks(run_dir) if failed else frozenset()  # only a failure's fix names a stack file
    evidence = Evidence(dumps=judged, sizes=mismatch, stalled_s=stalled, timeouts=tuple(timeouts),
                        stop_signal=findings.stopped_by, watchdog=hang_report, ranks=tuple(findings.world),
                        stacks=stacks, agent=(code, agent_stderr, str(logs)))
    context = Context("run-trainer", failed=failed, normal_end=not failed, interrupted=interrupted,
                      threshold=(hang_report or {}).get("threshold"))
    return evidence, Failures(findings=findings), context, notes


def exit_dumps(findings: Findings, run_dir: Path) -> tuple[Judged | None, float | None, list[float]]:
    """The flight records the ranks wrote as they ended (at exit, or at the launcher's SIGTERM) judged with the
    SIGTERM stacks: whose call differs from the majority's, who was behind; how long a collective stood pending
    in them, and the timeouts the collectives ran under."""
    from ..evidence.fr_dumps import find_dumps, pg_timeouts_s, stalled_s
    from ..judge.dumps import judge_dumps

    dumps = find_dumps([run_dir / "flight_recorder"])
    judged = judge_dumps(dumps, findings.failures, run_dir / STACKS, findings.world)
    return judged, stalled_s(dumps), pg_timeouts_s(dumps)


def kept_sizes(run_dir: Path):
    """The first mismatch in the sizes the ranks kept (Python 3.12+), or None."""
    from ..evidence.call_sizes import FOLDER, read_dir
    from ..judge import sizes

    return sizes.find(read_dir(run_dir / FOLDER))


def sigterm_stacks(run_dir: Path) -> frozenset[int]:
    """The ranks whose stack the bootstrap wrote at the launcher's SIGTERM (a non-empty rank<N>.txt)."""
    out = set()
    try:
        paths = sorted((run_dir / STACKS).glob("rank*.txt"))[:MAX_STACKS]
    except OSError:
        return frozenset()
    for path in paths:
        rank = path.stem[4:]
        try:
            if rank.isdigit() and path.stat().st_size > 0:
                out.add(int(rank))
        except OSError:
            continue
    return frozenset(out)


def size_warnings(run_dir: Path) -> list[dict]:
    """A job that ended normally: an all_to_all whose splits its receiver did not expect (the kept sizes, Python
    3.12+) is said, the end still a pass (its evidence is a normal end)."""
    from ..evidence.call_sizes import FOLDER, read_dir
    from ..judge import sizes

    with job_files.reading(run_dir):
        found = sizes.unnoticed(read_dir(run_dir / FOLDER))
    return [sizes.warning(found)] if found else []
