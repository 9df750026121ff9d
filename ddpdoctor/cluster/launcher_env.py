"""Node rank, node count, master endpoint and the job's host list as the launcher gives them (torchrun,
SLURM, PBS, MPI, Kubernetes, an explicit --hosts list), and each launcher's own fix for a node that never
came.

Pure functions of an environment mapping (and, for PBS, the node file's text), so they are unit-tested
with recorded environments. Flags always win over what is derived here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from ..errors import UsageError
from ..inputs import MAX_NODES, read_regular

# A host list is bounded before anything is expanded or kept: node[1-99999999] is one line naming the variable
# (exit 2), not 10^8 names in memory. The longest legitimate SLURM list (16k hosts spelled out) is ~200 KB;
# a PBS node file repeats a host once per slot (16k nodes x 128 slots ~ 40 MB).
MAX_LIST_CHARS = 1 << 20
MAX_NODE_FILE_BYTES = 64 << 20
_HOST_CHARS = re.compile(r"^[A-Za-z0-9._-]*$")


@dataclass
class LauncherInfo:
    source: str | None = None  # "torchrun", "kubernetes", "slurm", "pbs", "mpi", "hosts"
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


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def expand_slurm_nodelist(nodelist: str, name: str = "SLURM_JOB_NODELIST", limit: int = MAX_NODES) -> list[str]:
    """Expand a SLURM host list (``gpu[01-03,07],login1``, ``rack[1-2]-node[01-02]``) without calling scontrol.
    The hosts are counted before any is made: an unparsable list, or one naming more than ``limit`` hosts, is
    a UsageError naming the variable (``name``)."""
    def bad(why: str) -> UsageError:
        shown = nodelist if len(nodelist) <= 80 else nodelist[:77] + "..."
        return UsageError(f"{name}={shown!r}: {why}; expected a SLURM host list such as node[01-04,07],login1 "
                          f"(`scontrol show hostnames` expands it)")

    if len(nodelist) > MAX_LIST_CHARS:
        raise bad(f"longer than {MAX_LIST_CHARS} characters")
    plans: list[list[list[str] | str]] = []  # per host pattern: literal text and bracket groups' ranges
    total = 0
    for part in _split_outside_brackets(nodelist, bad):
        plan: list[list[str] | str] = []
        count = 1
        for literal, group in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", part):
            if not _HOST_CHARS.match(literal):
                raise bad(f"{next(c for c in literal if not _HOST_CHARS.match(c))!r} cannot be in a host name")
            if literal:
                plan.append(literal)
            if group:
                ranges = _ranges(group, bad)
                count *= sum(int(hi) - int(lo) + 1 for lo, hi in ranges)
                plan.append(ranges)  # type: ignore[arg-type]
            if count > limit:
                break
        total += count
        if total > limit:
            raise bad(f"names more than {limit} hosts, the most ddpdoctor takes")
        plans.append(plan)
    hosts: list[str] = []
    for plan in plans:
        hosts.extend(_expand(plan))
    return hosts


def _split_outside_brackets(text: str, bad: Callable[[str], UsageError]) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise bad("a bracket inside a bracket")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise bad("a ']' without its '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise bad("a '[' without its ']'")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _ranges(group: str, bad: Callable[[str], UsageError]) -> list[tuple[str, str]]:
    """"01-03,07" -> [("01", "03"), ("07", "07")]: digits only, each range ascending."""
    out = []
    for rng in group.split(","):
        lo, dash, hi = rng.strip().partition("-")
        hi = hi if dash else lo
        if not (lo.isdigit() and hi.isdigit() and lo.isascii() and hi.isascii()) or len(lo) > 18 or len(hi) > 18:
            raise bad(f"{_cut(rng.strip())!r} is not a number or a range of numbers like 01-04")
        if int(hi) < int(lo):
            raise bad(f"the range {rng.strip()} runs backwards")
        out.append((lo, hi))
    return out


def _cut(text: str, most: int = 40) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def _expand(plan: list) -> list[str]:
    """Every host of one counted pattern: literals as they are, each range's numbers padded like its start."""
    hosts = [""]
    for piece in plan:
        if isinstance(piece, str):
            hosts = [h + piece for h in hosts]
        else:
            values = [f"{i:0{len(lo)}d}" for lo, hi in piece for i in range(int(lo), int(hi) + 1)]
            hosts = [h + v for h in hosts for v in values]
    return hosts


def read_node_file(path: str) -> str:
    """A host file (PBS_NODEFILE, --hosts @FILE), at most MAX_NODE_FILE_BYTES read: a larger one is a
    UsageError naming it; an unreadable one an OSError (the caller says what it meant)."""
    raw = read_regular(path, MAX_NODE_FILE_BYTES)  # a FIFO or device: an OSError before open(), not a hang
    if len(raw) > MAX_NODE_FILE_BYTES:
        raise UsageError(f"{path}: larger than {MAX_NODE_FILE_BYTES >> 20} MiB: not a host file")
    return raw.decode("utf-8", errors="replace")


def hosts_of_node_file(text: str, name: str, limit: int = MAX_NODES) -> list[str]:
    """The distinct hosts of a node file in order (it repeats a host once per slot); more than ``limit``
    distinct hosts is a UsageError naming the file (``name``)."""
    hosts: dict[str, None] = {}
    for line in text.splitlines():
        host = line.strip()
        if host and not host.startswith("#"):
            hosts[host.split()[0]] = None
            if len(hosts) > limit:
                raise UsageError(f"{name}: more than {limit} distinct hosts, the most ddpdoctor takes")
    return list(hosts)


def from_env(env: Mapping[str, str], read_file: Callable[[str], str] | None = None, hostname: str = "") -> LauncherInfo:
    """What the launcher told this process, first match wins: torchrun, Kubernetes, SLURM, PBS, OpenMPI/MPICH.
    MPI's local rank is read whatever the scheduler: mpiexec inside a PBS or SLURM job may start several
    processes per node, and one of them speaks for the node."""
    info = _detect(env, read_file, hostname)
    mpi_local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK")
    if info.source != "torchrun" and mpi_local is not None:
        info.local_rank = mpi_local
    return info


def _detect(env: Mapping[str, str], read_file, hostname: str) -> LauncherInfo:
    if "GROUP_RANK" in env or ("NODE_RANK" in env and "TORCHELASTIC_RUN_ID" in env):
        return LauncherInfo(
            "torchrun", _int(env, "GROUP_RANK", "NODE_RANK"),
            _int(env, "GROUP_WORLD_SIZE") or nnodes_from_world(env),
            _endpoint(env), _int(env, "LOCAL_WORLD_SIZE"), local_rank=_int(env, "LOCAL_RANK"),
            job_id=env.get("TORCHELASTIC_RUN_ID"),
        )
    if "KUBERNETES_SERVICE_HOST" in env and any(k in env for k in ("PET_NNODES", "JOB_COMPLETION_INDEX", "RANK")):
        return _kubernetes(env)
    if "SLURM_NODEID" in env or "SLURM_JOB_NODELIST" in env:
        nodes = expand_slurm_nodelist(env.get("SLURM_JOB_NODELIST", "")) if env.get("SLURM_JOB_NODELIST") else []
        return LauncherInfo(
            "slurm", _int(env, "SLURM_NODEID"), _int(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
            env.get("MASTER_ADDR") or (nodes[0] if nodes else None),
            _slurm_nproc(env), hosts=nodes or None,
            local_rank=_int(env, "SLURM_LOCALID"), job_id=env.get("SLURM_JOB_ID"),
        )
    if "PBS_NODEFILE" in env and read_file is not None:
        try:
            text = read_file(env["PBS_NODEFILE"])
        except OSError:
            text = ""
        hosts = hosts_of_node_file(text, f"PBS_NODEFILE {env['PBS_NODEFILE']}")
        rank = rank_in_hosts(hosts, hostname)
        rank = _int(env, "PBS_TASKNUM", "PBS_NODENUM") if rank is None else rank
        return LauncherInfo("pbs", rank, len(hosts) or None, env.get("MASTER_ADDR") or (hosts[0] if hosts else None),
                            hosts=hosts or None, job_id=env.get("PBS_JOBID"))
    if "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
        size = _int(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
        per_node = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
        if per_node and per_node > 1:
            # several processes per node: nodes = size / processes per node; the node rank is assigned on
            # arrival (MPI's mapping policy decides which rank lands where, not a rule we can rely on)
            return LauncherInfo("mpi", None, (size // per_node) if size else None, _endpoint(env))
        return LauncherInfo("mpi", _int(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK"), size, _endpoint(env))
    return LauncherInfo(None, None, None, _endpoint(env))


def _slurm_nproc(env: Mapping[str, str]) -> int | None:
    """The training processes a SLURM node starts, where the job says: srun's tasks per node when srun starts
    several (one per GPU, the training itself), else the GPUs the step has on this node. One task per node
    (`srun --ntasks-per-node=1 ddpdoctor preflight`, or `... torchrun --nproc-per-node 8`) says nothing of it:
    taken as 1, healthy 8-GPU nodes were told `torchrun --nproc-per-node 1`."""
    tasks = _int(env, "SLURM_NTASKS_PER_NODE")
    return tasks if tasks is not None and tasks > 1 else _int(env, "SLURM_GPUS_ON_NODE")


def _kubernetes(env: Mapping[str, str]) -> LauncherInfo:
    """Kubeflow PyTorchJob (PET_* for torchrun-style jobs, else one pod per node with RANK/WORLD_SIZE),
    JobSet and indexed Jobs (JOB_COMPLETION_INDEX is the pod's index: the node rank)."""
    nnodes_text = env.get("PET_NNODES", "")
    nnodes = int(nnodes_text.split(":")[-1]) if nnodes_text.split(":")[-1].isdigit() else None
    if nnodes is None and "JOB_COMPLETION_INDEX" not in env:
        nnodes = _int(env, "WORLD_SIZE")
    rank = _int(env, "PET_NODE_RANK", "JOB_COMPLETION_INDEX")
    if rank is None and "PET_NNODES" not in env:
        rank = _int(env, "RANK")
    addr = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR")
    port = env.get("PET_MASTER_PORT") or env.get("MASTER_PORT")
    master = f"{addr}:{port}" if addr and port else addr
    return LauncherInfo("kubernetes", rank, nnodes, master, _int(env, "PET_NPROC_PER_NODE"))


def from_hosts(hosts: list[str], hostname: str, master: str | None) -> LauncherInfo:
    """--hosts: the list a user's ssh loop or pdsh uses; this node's rank is its place in the list."""
    return LauncherInfo("hosts", rank_in_hosts(hosts, hostname), len(hosts), master or hosts[0], hosts=hosts)


def detect(env: Mapping[str, str] | None = None, *, hosts: list[str] | None = None, master: str | None = None,
           hostname: str | None = None) -> LauncherInfo:
    """This node's launcher, once per run (the request caches it): --hosts when given, else this process's
    environment (``env``: os.environ by default) and, for PBS, its node file."""
    import os
    import socket

    hostname = socket.gethostname() if hostname is None else hostname
    if hosts:
        return from_hosts(hosts, hostname, master)
    return from_env(os.environ if env is None else env, read_file=read_node_file, hostname=hostname)


def rank_in_hosts(hosts: list[str], hostname: str) -> int | None:
    short = hostname.split(".")[0]
    return next((i for i, h in enumerate(hosts) if h == hostname or h.split(".")[0] == short), None)


def missing_hosts(hosts: list[str] | None, joined: list[str]) -> list[str]:
    """The launcher's hosts that did not join (compared by short name: node files mix FQDNs and names)."""
    if not hosts:
        return []
    came = {h.split(".")[0] for h in joined}
    return [h for h in hosts if h.split(".")[0] not in came]


def start_everywhere_fix(source: str | None, command: str, *, others_joined: bool = False,
                         endpoint: str = "the master") -> str:
    """Each launcher's own way of running one preflight on every node: the fix for a node that never came.
    When other nodes did join, the launcher did start every node (srun, pbsdsh): the missing ones could not
    reach the master, and the sbatch/PBS-script advice would send the user the wrong way."""
    if others_joined and source in ("pbs", "slurm", "mpi"):
        return (f"the launcher started every node, but the missing one(s) never reached {endpoint}: check their "
                f"firewall and route to it (their own error line says what they saw)")
    if source == "pbs":
        return (f"a PBS job script runs on the first node only: start the preflight on every node with "
                f"`pbsdsh -u -- bash -lc '{command}'` or `mpiexec --map-by ppr:1:node {command}`")
    if source == "slurm":
        return (f"an sbatch script runs on the first node only: start one preflight per node with "
                f"`srun --ntasks-per-node=1 {command}`")
    if source == "mpi":
        return (f"start one process per node: `mpiexec --map-by ppr:1:node {command}` (check the host file and -n)")
    if source == "kubernetes":
        return ("the pods of the missing ranks are not running or cannot reach the master's service: "
                "`kubectl get pods -o wide` and check the headless service / MASTER_ADDR")
    if source == "torchrun":
        return ("start torchrun on every node with identical --nnodes, --rdzv-endpoint and --rdzv-id (the "
                "scheduler's job id, never $RANDOM)")
    if source == "hosts":
        return f"start it on each missing host, e.g. `ssh HOST {command}`"
    return f"start `{command}` on the missing node(s), and check they can reach the master's address"


def nnodes_from_world(env: Mapping[str, str]) -> int | None:
    """torchrun's GROUP_WORLD_SIZE (the node count), else WORLD_SIZE // LOCAL_WORLD_SIZE (equal processes per
    node: with 3 on one node and 1 on the other, 4 // 1 would say 4 nodes)."""
    if _int(env, "GROUP_WORLD_SIZE"):
        return _int(env, "GROUP_WORLD_SIZE")
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
