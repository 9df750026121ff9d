"""Ray Train's jobs in attach's discovery: a worker's identity (Ray's own record of it, launchers/ray.py says why
that record, read with the job's rights through job_access) and the job's driver, which is no rank (the launcher
table's rules, applied to the processes found here)."""
from __future__ import annotations

import psutil

from ...launchers import ray
from . import job_access


def identity(proc: psutil.Process) -> ray.RayRank | None:
    """The worker's rank, world, run and session from Ray's system log of it; None when it holds none yet, it
    cannot be read (noted), or its ids cannot be had."""
    try:
        return job_access.ray_identity(proc.pid, proc.uids().effective, proc.gids().effective)
    except psutil.Error:
        return None


def without_drivers(found: list) -> list:
    """``found`` (discover's (process, environment, RankProcess, launcher) rows) without the driver of a Ray
    Train job found here (ray.is_driver: it holds Ray's driver log in that job's session): a scheduler's variable
    (an sbatch script's SLURM_PROCID) made it read like a rank. Nothing is looked at when no Ray worker was found."""
    sessions = {rp.session for _, _, rp, launcher in found if launcher == ray.NAME and rp.session}
    if not sessions:
        return found
    return [row for row in found if row[3] == ray.NAME or
            not ray.is_driver(row[2].pid, job_access.held_paths(row[2].pid, ray.is_driver_log), sessions)]
