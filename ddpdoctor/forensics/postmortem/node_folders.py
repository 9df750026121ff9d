"""Which folders of a torchrun log dir hold one job's nodes, and which folder holds a rank's logs.

torchrun writes `<log dir>/<rdzv id>_<random>/attempt_<k>/<local rank>/`. A job's nodes sit side by side two ways:
run-trainer gives each node its log dir in a shared run dir (`<run>/logs/<host>-<addr>-<pid>/`, other_nodes), and
`srun torchrun ... --log-dir DIR` with DIR shared has every node's torchrun make its own run folder in DIR
(same_job_runs), which says neither its host nor, for a rank that printed nothing, its rank.
"""
from __future__ import annotations

from pathlib import Path

from ...numbers import parse_int
from ..evidence import job_files
from ..evidence.job_files import global_rank_of
from ..evidence.model import RankFailure


def attempts(logs: Path) -> list[Path]:
    """torchrun writes <log_dir>/<run id>_<random>/attempt_<k>/<local_rank>/; newest run first (a folder
    that is not attempt_<number>, such as attempt_final, is skipped with a note)."""
    runs = sorted(job_files.subdirs(logs), key=job_files.mtime)
    if not runs:
        return []
    tries = [d for d in job_files.subdirs(runs[-1]) if d.name.startswith("attempt_")]
    return [d for _, d in job_files.numbered(tries, "attempt_")]


def rank_dir_of(rec: dict, attempt_dir: Path, siblings: list[Path]) -> Path | None:
    """The folder holding the logs of the rank a table's record names. Nodes sharing one --log-dir each have a
    local rank 0: it is the one whose lines carry torch's `[rank<R>]:` prefix for this rank, else the only one of
    that local rank showing no rank (a rank killed before it printed); else none (the table alone speaks: another
    rank's traceback read as this rank's made a rank killed by SIGKILL look like one that lost a peer)."""
    own = attempt_dir / str(rec["local_rank"])
    if not siblings:
        return own
    candidates = [d / str(rec["local_rank"]) for d in (attempt_dir, *siblings)]
    shown = [(c, global_rank_of(c)) for c in candidates if c.is_dir()]
    exact = [c for c, rank in shown if rank == rec["rank"]]
    unknown = [c for c, rank in shown if rank is None]
    return exact[0] if exact else unknown[0] if len(unknown) == 1 else None


# `srun torchrun ... --log-dir DIR` with DIR shared: each node's torchrun makes its own `<rdzv id>_<random>` folder
# in it. Their first attempt folders are made as the rendezvous they complete together ends, within a second or two
# of each other here (loaded machines: a few); a rerun into the same DIR is a start-up and a rendezvous later, and
# holds the same ranks again.
SAME_START_S = 10.0


def same_job_runs(logs: Path) -> list[Path]:
    """The last attempt folders of the other nodes of the newest job in a shared log dir: run folders beside the
    newest that say they are of its job (``of_one_job``)."""
    runs = sorted(job_files.subdirs(logs), key=job_files.mtime)
    mine = attempts(logs)
    if len(runs) < 2 or not mine:
        return []
    taken, out = shown_ranks(mine[-1]), []
    for run in reversed(runs[:-1]):
        tries = run_attempts(run)
        if of_one_job(runs[-1], mine, run, tries, taken, default_id=True):
            out.append(tries[-1])
            taken |= shown_ranks(tries[-1])
    return out


def run_attempts(run: Path) -> list[Path]:
    """A torchrun run folder's attempt folders, in order."""
    return [d for _, d in job_files.numbered([d for d in job_files.subdirs(run) if d.name.startswith("attempt_")],
                                             "attempt_")]


def of_one_job(my_run: Path, mine: list[Path], run: Path, tries: list[Path], taken: set[int],
               default_id: bool) -> bool:
    """A run folder holds another node of this job only when it says so: the same rendezvous id (torchrun's
    default id "none" only inside one log dir the user named, ``default_id``: side by side in a parent folder,
    every plain torchrun job's folder says "none"), as many attempts, its first attempt started within
    SAME_START_S of this one's (the nodes leave the rendezvous together), and none of the ranks already taken (a
    rerun into the same folder holds the same ranks again). Never because it is a sibling."""
    rdzv = rdzv_id_of(run)
    if rdzv is None or rdzv != rdzv_id_of(my_run) or (rdzv == "none" and not default_id):
        return False
    if not tries or len(tries) != len(mine) or abs(job_files.mtime(tries[0]) - job_files.mtime(mine[0])) > SAME_START_S:
        return False
    return not shown_ranks(tries[-1]) & taken


def shown_ranks(attempt_dir: Path) -> set[int]:
    """The global ranks an attempt folder's logs show (torch's `[rank<R>]:` lines; a rank that printed none: not)."""
    return {r for r in (global_rank_of(d) for d in job_files.subdirs(attempt_dir)) if r is not None}


def rdzv_id_of(run: Path) -> str | None:
    """The rendezvous id in a torchrun run folder's name: torch makes it mkdtemp(prefix=f"{rdzv_id}_"), the id, "_"
    and 8 random characters, which may hold "_" too. None: not a name of that shape."""
    name = run.name
    return name[:-9] if len(name) > 9 and name[-9] == "_" else None


def other_nodes(logs: Path) -> list[tuple[str | None, Path]]:
    """The other nodes' (host, latest attempt dir): with a shared torchrun --log-dir, every node's run folder
    (same_job_runs; its host not known); with a shared --run-dir, run-trainer's <host>-<addr>-<pid> folders side
    by side, each only where its newest run folder says it is of this job (of_one_job: DIR's siblings are other
    jobs' folders with `--log-dir logs/$SLURM_JOB_ID` or torchelastic's default folders in the temporary folder)."""
    out: list[tuple[str | None, Path]] = [(None, d) for d in same_job_runs(logs)]
    my_runs = sorted(job_files.subdirs(logs), key=job_files.mtime)
    mine = attempts(logs)
    if not my_runs or not mine:
        return out
    taken = shown_ranks(mine[-1]).union(*(shown_ranks(d) for _, d in out))
    for node_dir in sorted(p for p in job_files.subdirs(logs.parent) if p != logs):
        runs = sorted(job_files.subdirs(node_dir), key=job_files.mtime)
        tries = run_attempts(runs[-1]) if runs else []
        if of_one_job(my_runs[-1], mine, runs[-1] if runs else node_dir, tries, taken, default_id=False):
            out.append((node_dir.name.rsplit("-", 2)[0], tries[-1]))  # <host>-<addr>-<pid>
            taken |= shown_ranks(tries[-1])
    return out


def silent_ranks(folders: list[Path], fails: list[RankFailure]) -> list[RankFailure]:
    """The ranks of one attempt spread over several nodes' folders that left no failure record: the job's ranks are
    0 .. (its local rank folders in all) - 1, so those no record names. Which folder is whose is not known (a rank
    SIGKILLed before it printed shows no `[rank<R>]:` line): by number only, host unknown."""
    count = sum(1 for folder in folders for d in job_files.subdirs(folder) if parse_int(d.name, hi=1 << 20) is not None)
    named = {f.rank for f in fails}
    return [RankFailure(rank=rank, local_rank=None, host=None, exit_code=None, category="signal",
                        reason="left no error record") for rank in range(count) if rank not in named]


def ranks_without_record(attempt_dir: Path | None, fails: list[RankFailure], host: str) -> list[RankFailure]:
    """Local ranks of this attempt (torchrun's per-rank dirs) with no failure record at all: the launcher
    stopped them (without its failure table, that is all their silence can mean)."""
    if attempt_dir is None or not attempt_dir.is_dir():
        return []
    known = {f.local_rank for f in fails}
    offsets = {f.rank - f.local_rank for f in fails if f.rank is not None and f.local_rank is not None}
    out = []
    try:
        dirs = sorted((p for p in attempt_dir.iterdir() if parse_int(p.name, hi=999_999_999, strip=False) is not None
                       and p.is_dir()), key=lambda p: int(p.name))
    except OSError:
        return []
    for d in dirs[:4096]:
        local = int(d.name)
        if local in known:
            continue
        rank = global_rank_of(d)
        if rank is None and len(offsets) == 1:
            rank = local + next(iter(offsets))
        out.append(RankFailure(rank=rank, local_rank=local, host=host, exit_code=None, category="signal",
                               reason="left no error record"))
    return out
