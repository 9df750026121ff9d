"""The launchers as data: one module per launcher (torchrun, Lightning's own, Kubernetes, SLURM, PBS, Open
MPI/MPICH, --hosts), each a `base.Launcher`, and the table preflight, run-trainer, attach and the checks (through
ddpdoctor.api) all read: which launcher started this process, its node rank and count, its fix for a node that never came,
its per-node variables, and how a worker it started knows its rank.

A new launcher is one module here with a LAUNCHER and its place in `LAUNCHERS` (the order is the detection's:
the first whose ``present`` matches wins; torchrun first, as its workers also sit inside SLURM or MPI jobs, then
Lightning's, whose workers inherit a scheduler's variables when started inside an allocation).
"""
from __future__ import annotations

from typing import Mapping

from . import hosts as _hosts
from . import kubernetes, lightning, mpi, pbs, slurm, torchrun
from .base import Context, Launcher, LauncherInfo, VarFamily, env_int, nnodes_from_world, rank_in_hosts
from .hostlists import (MAX_LIST_CHARS, MAX_NODE_FILE_BYTES, expand_slurm_nodelist, hosts_of_node_file,
                        missing_hosts, read_node_file)

LAUNCHERS: tuple[Launcher, ...] = (torchrun.LAUNCHER, lightning.LAUNCHER, kubernetes.LAUNCHER, slurm.LAUNCHER,
                                   pbs.LAUNCHER, mpi.LAUNCHER)
ALL: tuple[Launcher, ...] = LAUNCHERS + (_hosts.LAUNCHER,)
VARIABLES: tuple[VarFamily, ...] = tuple(f for launcher in ALL for f in launcher.variables)
# The schedulers' job ids, the order a run id takes them in (SLURM, then PBS); LSF's, which starts no node here
# but names a job a metric may carry, last.
SCHEDULERS: tuple[Launcher, ...] = (slurm.LAUNCHER, pbs.LAUNCHER)
# The job ids of the schedulers that start nodes here: a run id takes them (documents.RUN_ID_VARS, run-trainer)
RUN_JOB_ID_VARS: tuple[str, ...] = tuple(v for launcher in SCHEDULERS for v in launcher.job_id_vars)
JOB_ID_VARS: tuple[str, ...] = RUN_JOB_ID_VARS + ("LSB_JOBID",)
# torchrun's id of a run (its --rdzv-id; "none" when none was given): a job's id where no scheduler names one
RUN_ID_VAR = "TORCHELASTIC_RUN_ID"

__all__ = ["ALL", "LAUNCHERS", "VARIABLES", "Context", "Launcher", "LauncherInfo", "VarFamily", "by_name", "detect",
           "env_int", "expand_slurm_nodelist", "job_id", "job_id_var", "JOB_ID_VARS", "RUN_JOB_ID_VARS", "RUN_ID_VAR", "from_env", "from_hosts", "hosts_of_node_file", "missing_hosts",
           "nnodes_from_world", "per_node", "rank_in_hosts", "read_node_file", "start_everywhere_fix",
           "MAX_LIST_CHARS", "MAX_NODE_FILE_BYTES"]


def job_id(env: Mapping[str, str]) -> str | None:
    """The scheduler's id of the job this process runs in (JOB_ID_VARS, the first set), else None."""
    return next((env[v].strip() for v in JOB_ID_VARS if (env.get(v) or "").strip()), None)


def job_id_var(source: str | None) -> str | None:
    """The variable a launcher names its job with, as a job script spells it (``$SLURM_JOB_ID``), or None."""
    launcher = by_name(source)
    return f"${launcher.job_id_vars[0]}" if launcher is not None and launcher.job_id_vars else None


def by_name(name: str | None) -> Launcher | None:
    return next((launcher for launcher in ALL if launcher.name == name), None)


def from_env(env: Mapping[str, str], read_file=None, hostname: str = "") -> LauncherInfo:
    """What the launcher told this process, first match in LAUNCHERS wins. MPI's local rank is read whatever the
    scheduler: mpiexec inside a PBS or SLURM job may start several processes per node, and one speaks for it."""
    ctx = Context(hostname=hostname, read_file=read_file)
    launcher = next((launcher for launcher in LAUNCHERS if launcher.present(env)), None)
    if launcher is None:
        from .base import endpoint

        info = LauncherInfo(None, None, None, endpoint(env))
    else:
        info = launcher.read(env, ctx)
    mpi_local = env_int(env, *mpi.LOCAL_RANK_VARS)
    if info.source != "torchrun" and mpi_local is not None:
        info.local_rank = mpi_local
    return info


def from_hosts(hosts: list[str], hostname: str, master: str | None) -> LauncherInfo:
    """--hosts: the list a user's ssh loop or pdsh uses; this node's rank is its place in the list."""
    return _hosts.from_hosts(hosts, hostname, master)


def detect(env: Mapping[str, str] | None = None, *, hosts: list[str] | None = None, master: str | None = None,
           hostname: str | None = None, reader=None) -> LauncherInfo:
    """This node's launcher, once per run (the caller caches it): --hosts when given, else this process's
    environment (``env``: os.environ by default) and, for PBS, its node file (``reader``: from_env's stand-in)."""
    import os
    import socket

    hostname = socket.gethostname() if hostname is None else hostname
    if hosts:
        return from_hosts(hosts, hostname, master)
    return (reader or from_env)(os.environ if env is None else env, read_file=read_node_file, hostname=hostname)


def start_everywhere_fix(source: str | None, command: str, *, others_joined: bool = False,
                         endpoint: str = "the master") -> str:
    """Each launcher's own way of running ``command`` on every node: the fix for a node that never came. When
    other nodes did join, a launcher that starts every node (srun, pbsdsh, mpiexec) did: the missing ones could
    not reach the master, and the job-script advice would send the user the wrong way."""
    launcher = by_name(source)
    if others_joined and launcher is not None and launcher.started_all:
        return (f"the launcher started every node, but the missing one(s) never reached {endpoint}: check their "
                f"firewall and route to it (their own error line says what they saw)")
    if launcher is None:
        return f"start `{command}` on the missing node(s), and check they can reach the master's address"
    return launcher.fix(command)


def per_node(var: str) -> str | None:
    """The launcher family that sets ``var`` per node or per process (None: the variable must agree)."""
    return next((family.name for family in VARIABLES if family.owns(var)), None)
