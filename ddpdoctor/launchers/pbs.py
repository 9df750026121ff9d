"""PBS (PBS Pro, OpenPBS, Torque): the node file gives the hosts, this host's place in it the node rank."""
from __future__ import annotations

from typing import Mapping

from .base import Context, Launcher, LauncherInfo, VarFamily, env_int, rank_in_hosts
from .hostlists import hosts_of_node_file


def present(env: Mapping[str, str]) -> bool:
    return "PBS_NODEFILE" in env


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    text = ""
    if ctx.read_file is not None:
        try:
            text = ctx.read_file(env["PBS_NODEFILE"])
        except OSError:
            text = ""
    hosts = hosts_of_node_file(text, f"PBS_NODEFILE {env['PBS_NODEFILE']}")
    rank = rank_in_hosts(hosts, ctx.hostname)
    rank = env_int(env, "PBS_TASKNUM", "PBS_NODENUM") if rank is None else rank
    return LauncherInfo("pbs", rank, len(hosts) or None, env.get("MASTER_ADDR") or (hosts[0] if hosts else None),
                        hosts=hosts or None, job_id=env.get("PBS_JOBID"))


def fix(command: str) -> str:
    return (f"a PBS job script runs on the first node only: start it on every node with "
            f"`pbsdsh -u -- bash -lc '{command}'` or `mpiexec --map-by ppr:1:node {command}`")


LAUNCHER = Launcher(
    "pbs", present, read, fix, started_all=True, host_list="PBS_NODEFILE", job_id_vars=("PBS_JOBID",),
    variables=(
        # PBS Pro Reference Guide, "PBS Environment Variables", and pbsdsh(1) (Torque/OpenPBS): "PBS_TASKNUM,
        # PBS_NODENUM and PBS_VNODENUM ... contain the TM task id, the node identifier, and the cpu (virtual
        # node) identifier"; PBS_MOMPORT is the local MoM's.
        VarFamily("PBS", "PBS Pro Reference Guide: PBS environment variables; pbsdsh(1)", frozenset({
            "PBS_TASKNUM", "PBS_NODENUM", "PBS_VNODENUM", "PBS_MOMPORT",
        })),
    ))
