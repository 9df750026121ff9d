"""What one launcher is, as data: how it is recognised, what it tells a process (LauncherInfo), its own fix for a
node that never came, the variables it sets per node, and how a worker it started tells its rank.

Every integer read from the environment goes through `numbers.parse_int` (`env_int`): a value such as '²' or
'١' is not a number here, so it is ignored like an absent variable, never a ValueError (exit 4).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..numbers import parse_int


@dataclass
class LauncherInfo:
    source: str | None = None  # its name in LAUNCHERS: "torchrun", "lightning", "kubernetes", "slurm", "pbs", "mpi",
    #                            "hosts"
    node_rank: int | None = None
    nnodes: int | None = None
    master: str | None = None  # host or host:port
    nproc_per_node: int | None = None
    hosts: list[str] | None = None  # the job's hosts in node-rank order, where the launcher lists them
    local_rank: int | None = None  # several processes per node (torchrun, mpiexec): only local rank 0 speaks
    job_id: str | None = None

    @property
    def another_speaks(self) -> bool:
        """This is a second process the launcher started on this node: local rank 0 speaks for the node."""
        return self.local_rank not in (None, 0)


@dataclass(frozen=True)
class VarFamily:
    """Variables a launcher sets differently on every node or process by nature (never configuration drift),
    with the documentation they come from."""
    name: str
    source: str
    names: frozenset[str]
    prefixes: tuple[str, ...] = ()  # documented families whose every member is per node

    def owns(self, var: str) -> bool:
        return var in self.names or (bool(self.prefixes) and var.startswith(self.prefixes))


@dataclass(frozen=True)
class Context:
    """What detection may use besides the environment: the host name and a reader for host files."""
    hostname: str = ""
    read_file: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Launcher:
    """One launcher. ``present`` recognises its environment; ``read`` says what it tells this process;
    ``fix(command)`` starts ``command`` on every node its way; ``started_all`` says that when some nodes
    joined, this launcher did start every node (the missing ones could not reach the master);
    ``rank_vars``/``local_rank_vars``/``size_vars`` name how a worker it started knows its global rank, its rank
    on the node and the world size (attach reads them from a process's environment); ``place_vars`` name the job
    and then the node a process runs in (attach started inside such a job step reads the ranks of its own job on
    its own node only). ``first_is_parent``: a launcher that gives its workers no rank variable (Lightning's own):
    local rank 0 is the user's process, the parent of the others, with its variables set in-process; a rank is
    ``node_rank_vars`` times the processes on the node plus its local rank. ``job_id_vars``: the variables a
    scheduler names its job with (run ids, attach's job key: launchers.job_id)."""
    name: str
    present: Callable[[Mapping[str, str]], bool]
    read: Callable[[Mapping[str, str], Context], LauncherInfo]
    fix: Callable[[str], str]
    started_all: bool = False
    host_list: str | None = None  # the variable or flag that lists the job's hosts, when the launcher has one
    rank_vars: tuple[str, ...] = ()
    local_rank_vars: tuple[str, ...] = ()
    size_vars: tuple[str, ...] = ()
    place_vars: tuple[str, ...] = ()
    variables: tuple[VarFamily, ...] = field(default=())
    node_rank_vars: tuple[str, ...] = ()
    first_is_parent: bool = False
    job_id_vars: tuple[str, ...] = ()  # the scheduler's id of the job (run ids, attach's job key), first set wins


def env_int(env: Mapping[str, str], *names: str, signed: bool = False) -> int | None:
    """The first of ``names`` set to an integer (ASCII digits, bounded); anything else is as if unset."""
    for name in names:
        value = parse_int(env.get(name), signed=signed, lo=None if signed else 0)
        if value is not None:
            return value
    return None


def endpoint(env: Mapping[str, str], addr_var: str = "MASTER_ADDR", port_var: str = "MASTER_PORT") -> str | None:
    addr = env.get(addr_var)
    if not addr:
        return None
    port = env.get(port_var)
    return f"{addr}:{port}" if port else addr


def nnodes_from_world(env: Mapping[str, str]) -> int | None:
    """torchrun's GROUP_WORLD_SIZE (the node count), else WORLD_SIZE // LOCAL_WORLD_SIZE (equal processes per
    node: with 3 on one node and 1 on the other, 4 // 1 would say 4 nodes)."""
    if env_int(env, "GROUP_WORLD_SIZE"):
        return env_int(env, "GROUP_WORLD_SIZE")
    world, local = env_int(env, "WORLD_SIZE"), env_int(env, "LOCAL_WORLD_SIZE")
    if world and local:
        return max(1, world // local)
    return None


def rank_in_hosts(hosts: list[str], hostname: str) -> int | None:
    short = hostname.split(".")[0]
    return next((i for i, h in enumerate(hosts) if h == hostname or h.split(".")[0] == short), None)
