"""Node rank, node count and master endpoint as the job's launcher gives them (torchrun, SLURM, PBS, MPI).

Pure functions of an environment mapping (and, for PBS, the node file's text), so they are unit-tested
with dicts. Flags always win over what is derived here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass
class LauncherInfo:
    source: str | None = None  # "torchrun", "slurm", "pbs", "mpi"
    node_rank: int | None = None
    nnodes: int | None = None
    master: str | None = None  # host or host:port
    nproc_per_node: int | None = None


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def expand_slurm_nodelist(nodelist: str) -> list[str]:
    """Expand a SLURM host list (``gpu[01-03,07],login1``) without calling scontrol."""
    hosts: list[str] = []
    for part in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", nodelist):
        hosts.extend(_expand_host(part))
    return hosts


def _expand_host(pattern: str) -> list[str]:
    """One host pattern, every bracket group expanded (``rack[1-2]-node[01-02]`` gives four hosts)."""
    m = re.match(r"^(.*?)\[([^\]]*)\](.*)$", pattern)
    if not m:
        return [pattern]
    prefix, ranges, suffix = m.groups()
    out = []
    for rng in ranges.split(","):
        lo, _, hi = rng.partition("-")
        values = [lo] if not hi else [f"{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
        for v in values:
            out.extend(_expand_host(f"{prefix}{v}{suffix}"))
    return out


def from_env(env: Mapping[str, str], read_file: Callable[[str], str] | None = None, hostname: str = "") -> LauncherInfo:
    """What the launcher told this process, first match wins: torchrun, SLURM, PBS, OpenMPI/MPICH."""
    if "GROUP_RANK" in env or ("NODE_RANK" in env and "TORCHELASTIC_RUN_ID" in env):
        return LauncherInfo(
            "torchrun", _int(env, "GROUP_RANK", "NODE_RANK"),
            _int(env, "GROUP_WORLD_SIZE") or nnodes_from_world(env),
            _endpoint(env), _int(env, "LOCAL_WORLD_SIZE"),
        )
    if "SLURM_NODEID" in env or "SLURM_JOB_NODELIST" in env:
        nodes = expand_slurm_nodelist(env.get("SLURM_JOB_NODELIST", "")) if env.get("SLURM_JOB_NODELIST") else []
        return LauncherInfo(
            "slurm", _int(env, "SLURM_NODEID"), _int(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
            env.get("MASTER_ADDR") or (nodes[0] if nodes else None),
            _int(env, "SLURM_NTASKS_PER_NODE", "SLURM_GPUS_ON_NODE"),
        )
    if "PBS_NODEFILE" in env and read_file is not None:
        try:
            lines = [ln.strip() for ln in read_file(env["PBS_NODEFILE"]).splitlines() if ln.strip()]
        except OSError:
            lines = []
        hosts = list(dict.fromkeys(lines))  # the node file repeats a host once per slot
        short = hostname.split(".")[0]
        rank = next((i for i, h in enumerate(hosts) if h == hostname or h.split(".")[0] == short), None)
        rank = _int(env, "PBS_TASKNUM", "PBS_NODENUM") if rank is None else rank
        return LauncherInfo("pbs", rank, len(hosts) or None, env.get("MASTER_ADDR") or (hosts[0] if hosts else None))
    if "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
        return LauncherInfo(
            "mpi", _int(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
            _endpoint(env),
        )
    return LauncherInfo(None, None, None, _endpoint(env))


def nnodes_from_world(env: Mapping[str, str]) -> int | None:
    world, local = _int(env, "WORLD_SIZE"), _int(env, "LOCAL_WORLD_SIZE")
    if world and local:
        return max(1, world // local)
    return None


def _endpoint(env: Mapping[str, str]) -> str | None:
    addr = env.get("MASTER_ADDR")
    if not addr:
        return None
    port = env.get("MASTER_PORT")
    return f"{addr}:{port}" if port else addr
