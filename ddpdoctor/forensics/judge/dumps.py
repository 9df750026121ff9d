"""The judge's entry for flight-recorder dumps a finished job left (with the ranks' failure records): the same
verdict as a live hang's, from the files."""
from __future__ import annotations

from pathlib import Path

from ..evidence import torchrun_files
from ..evidence.fr_dumps import job_ranks
from .graph import judge
from .words import to_json


def judge_dumps(dumps: dict[int, tuple[Path, dict]], failures: list | None = None, stacks_dir: Path | None = None,
                world: list[int] | None = None) -> dict | None:
    """The hang verdict (the one judge) from what a finished job left: the dumps (which may
    have been written after a timeout: gloo then counts the timed-out collective as completed, so the ranks'
    last sequence ids and calls are compared), the ranks' failure records (``failures``: how each ended, where
    its traceback stands, the store keys a timed-out init waited for), the stacks at the launcher's SIGTERM
    (``stacks_dir``) and every rank of the job (``world``, with the dumps' pg_config). Without dumps the
    verdict counts only where the records' waits name a rank (init/store keys, a send/recv peer): else None."""
    if not dumps and not failures:
        return None
    ranks = sorted(set(job_ranks(dumps) if dumps else []) | set(world or []))
    job = torchrun_files.job_after(failures or [], dumps, stacks_dir, ranks)
    found = judge(job)
    verdict = to_json(found, job)
    if not dumps and (not found.culprits or not all(c.named for c in found.culprits)
                      or found.category.value in ("missing_rank", "outside_collectives", "unknown")):
        return None  # the logs alone place no rank: attribution's own reading of them stands
    verdict["source"] = "flight-recorder dumps" if dumps else "the ranks' records"
    verdict["files"] = {str(r): str(p) for r, (p, _) in sorted((dumps or {}).items())}
    return verdict
