"""The torch.distributed jobs on this machine, from every process's environment and the process tree: torchrun's
agent and its workers, or workers srun, mpirun or a pod started without torchrun (the launcher table says which
variables carry a worker's rank), or Ray Train's workers, whose rank is Ray's own record of them (launchers/ray.py).
A process whose environment cannot be read is counted, not guessed.

A job is a process tree of one user: a run id (or any key) a job's environment gives is the job's own word, so
ranks of different uids are never one job, nor are launcher trees whose ranks collide (two rank 0s); they are
listed apart (``choose`` says the clash, exit 2)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from ...launchers import JOB_ID_VARS, LAUNCHERS, RUN_ID_VAR, by_name, env_int, mpi, ray, slurm
from ...launchers.agents import is_agent, never_rank, starts_ranks
from ...numbers import parse_int
from ...redaction import redact_argv
from ..evidence import user_code
from ..evidence.procs import runs_python
from . import dump_pipe, job_access, ray_jobs

# torch's elastic agent: torchrun, or `accelerate launch`, which runs the same agent in its own process
BOOTSTRAP = "ddpdoctor.launch.bootstrap"


@dataclass
class RankProcess:
    pid: int
    rank: int
    local_rank: int | None
    world_size: int | None
    node_rank: int | None
    cmdline: str
    username: str | None
    worker_socket: str | None = None  # run-trainer's worker server (its flight recorder), when it started the job
    dump_pipe: tuple[str, str] | None = None  # torch's dump pipe and dump file, when the job set them (dump_pipe.py)
    uid: int | None = None  # the process's effective uid and gid: whose rights act on what it names (job_access)
    gid: int | None = None
    started: float | None = None  # its create time: the same process, not a reused pid, when --stop signals
    parent: int | None = None
    unused: list[str] = field(default_factory=list)  # what it named that is not its own: noted when it is read
    entry: tuple[str | None, str | None] = (None, None)  # (script, module) its command line runs: the user's code
    job: str | None = None  # the job's key where its launcher says it outside the environment (Ray Train's run)
    thread: str | None = None  # the thread that runs its training, where not the main one (Ray Train's)
    session: str | None = None  # Ray's session folder, for a Ray Train worker (its driver is no rank)


@dataclass
class Job:
    """One job's processes on this node: its key (TORCHELASTIC_RUN_ID, the scheduler's job id, or the master
    endpoint), the launcher that started the ranks, the agent (torchrun) if any, the ranks found here."""
    key: str
    launcher: str | None
    world_size: int | None
    master: str | None
    ranks: list[RankProcess] = field(default_factory=list)
    agent_pid: int | None = None
    command: str = ""
    uid: int | None = None
    user: str | None = None
    agents: list[tuple[int, float]] = field(default_factory=list)  # torchrun's agents of the job: (pid, started)

    def to_json(self) -> dict:
        return {"id": self.key, "launcher": self.launcher, "world_size": self.world_size, "master": self.master,
                "agent_pid": self.agent_pid, "command": self.command, "user": self.user, "uid": self.uid,
                "ranks_here": sorted(r.rank for r in self.ranks), "ranks_elsewhere": self.elsewhere()}

    @property
    def root_pid(self) -> int | None:
        """The process that names this job for --pid: torchrun's agent, else its ranks' parent, else a rank."""
        parents = {r.parent for r in self.ranks}
        return self.agent_pid or (parents.pop() if len(parents) == 1 and None not in parents else None) or \
            (self.ranks[0].pid if self.ranks else None)

    def elsewhere(self) -> list[int]:
        """Ranks of the world with no process here (other nodes', or ended ones)."""
        here = {r.rank for r in self.ranks}
        return [r for r in range(self.world_size or 0) if r not in here]


@dataclass
class Discovery:
    jobs: list[Job]
    unreadable: list[int]  # python processes whose environment this user may not read
    unranked: list[int] = field(default_factory=list)  # Ray Train workers no record of Ray's gives a rank


def rank_of(env: dict) -> tuple[int | None, str | None, int | None, int | None]:
    """(rank, launcher, local rank, world size) from a process's environment: torch's own RANK first (every
    launcher that runs torch.distributed's env:// sets it), else the launcher's own rank variable."""
    for launcher in LAUNCHERS:
        if launcher.first_is_parent:
            if launcher.present(env):  # no rank variable: its parent tells (spawned_ranks)
                return None, launcher.name, env_int(env, *launcher.local_rank_vars), env_int(env, *launcher.size_vars)
            continue
        own = any(v in env for v in launcher.rank_vars if v != "RANK")  # PMIX_RANK without OMPI_*/PMI_*
        if not launcher.rank_vars or not (launcher.present(env) or own):
            continue
        rank = env_int(env, "RANK", *launcher.rank_vars)
        if rank is not None:
            return (rank, launcher.name, env_int(env, "LOCAL_RANK", *launcher.local_rank_vars),
                    env_int(env, "WORLD_SIZE", *launcher.size_vars))
    rank = env_int(env, "RANK")
    if rank is not None and "WORLD_SIZE" in env:
        return rank, None, env_int(env, "LOCAL_RANK"), env_int(env, "WORLD_SIZE")
    return None, None, None, None


MPI_JOB_VARS = mpi.LAUNCHER.job_id_vars
SLURM_JOB_VARS = slurm.LAUNCHER.job_id_vars


def job_key(env: dict) -> str:
    for name in (RUN_ID_VAR, *JOB_ID_VARS, *MPI_JOB_VARS):
        if env.get(name):
            step = env.get("SLURM_STEP_ID", "") if name in SLURM_JOB_VARS else ""
            master = f"@{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
            return f"{env[name]}{'.' + step if step else ''}{master if env.get('MASTER_PORT') else ''}"
    return f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"


def discover(only_pids: set[int] | None = None) -> Discovery:
    """Every rank process on this machine (or among ``only_pids`` and their descendants), grouped by job."""
    skip = {os.getpid(), *(p.pid for p in _ancestors())}
    unreadable: list[int] = []
    unranked: list[int] = []
    candidates = _candidates(only_pids)
    rank_pids: set[int] = set()
    found: list[tuple[psutil.Process, dict, RankProcess, str]] = []
    spawned: list[tuple[psutil.Process, dict, list[str], str | None, str]] = []
    for proc in candidates:
        if proc.pid in skip:
            continue
        try:
            env = proc.environ()
            argv = proc.cmdline()
            user = proc.username()
        except psutil.AccessDenied:
            if runs_python(proc) or _is_ray_worker(proc):
                unreadable.append(proc.pid)
            continue
        except psutil.Error:
            continue
        if ray.is_worker(argv):
            got = ray_rank(proc, env, argv, user)
            if got is None:
                unranked.append(proc.pid)
            else:
                found.append(got)
            continue  # its environment has no rank (Ray sets it in-process): only Ray's record says it
        rank, launcher, local, world = rank_of(env)
        if never_rank(argv):
            continue  # torchrun under srun inherits SLURM_PROCID: an agent is walked through, never a rank
        if rank is None or not runs_python(proc) or is_ddpdoctor(argv):
            if rank is None and launcher and runs_python(proc):
                spawned.append((proc, env, argv, user, launcher))
            continue  # another ddpdoctor (attach under the same srun) is no rank
        found.append((proc, env, _rank_process(proc, env, env, rank, local, world, env_int(env, "GROUP_RANK"), argv,
                                               user), launcher or ""))
        rank_pids.add(proc.pid)
    found += spawned_ranks(spawned, {p.pid for p in candidates} - skip)
    found = ray_jobs.without_drivers(without_agents(found))
    rank_pids = {rp.pid for _, _, rp, _ in found}
    found = in_own_place(found, os.environ) if only_pids is None else found
    groups: dict[tuple[str, int | None], list[tuple[RankProcess, str, dict]]] = {}
    for proc, env, rp, launcher in found:
        if rp.parent in rank_pids and _same_rank(proc, rp, found):
            continue  # a rank's own child (a DataLoader worker) carries its RANK: the rank is its parent
        groups.setdefault((rp.job or job_key(env), rp.uid), []).append((rp, launcher, env))
    jobs = [job for (key, _), members in groups.items() for job in _jobs_of(key, members)]
    return Discovery(sorted(jobs, key=lambda j: (j.key, j.uid if j.uid is not None else -1, j.root_pid or 0)),
                     unreadable, unranked)


def without_agents(found: list) -> list:
    """The launcher table's rule (launchers.agents.starts_ranks): a process whose children carry another rank
    identity started them, so it is an agent the table does not name, not a rank; Lightning's first rank, the
    parent of its other workers (first_is_parent), stays a rank."""
    kids: dict[int, list[dict]] = {}
    for _, env, rp, launcher in found:
        if rp.parent is not None and not getattr(by_name(launcher), "first_is_parent", False):
            kids.setdefault(rp.parent, []).append(env)
    rank_vars = {"RANK", *(v for launcher in LAUNCHERS for v in launcher.rank_vars)}
    return [f for f in found if not starts_ranks(f[1], kids.get(f[2].pid, ()), rank_vars)]


def _jobs_of(key: str, members: list[tuple[RankProcess, str, dict]]) -> list[Job]:
    """The jobs of one key and one user: one, or one per launcher tree (the ranks' parent) when the trees'
    ranks collide or their world sizes differ: those are different jobs that share a key (a copied run id),
    never merged. Trees whose ranks fit together are one job (several torchrun agents of one job on a host)."""
    trees: dict[int | None, list[tuple[RankProcess, str, dict]]] = {}
    for member in members:
        trees.setdefault(member[0].parent, []).append(member)
    ranks = [rp.rank for rp, _, _ in members]
    worlds = {rp.world_size for rp, _, _ in members}
    parts = [members] if len(ranks) == len(set(ranks)) and len(worlds) == 1 else list(trees.values())
    jobs = []
    for part in parts:
        first, launcher, env = part[0]
        job = Job(key, launcher or None, first.world_size, _master(env), uid=first.uid, user=first.username)
        job.ranks = sorted((rp for rp, _, _ in part), key=lambda r: r.rank)
        _find_agent(job)
        jobs.append(job)
    return jobs


def _rank_process(proc: psutil.Process, env: dict, own_env: dict, rank: int, local: int | None, world: int | None,
                  node: int | None, argv: list[str], user: str | None) -> RankProcess:
    """One rank as attach keeps it: its ids (whose rights act on what it names: job_access), and the worker
    socket only where its own process listens on it (``own_env``: the environment the process really has)."""
    try:
        ids = (proc.uids().effective, proc.gids().effective, proc.create_time(), proc.ppid())
    except psutil.Error:
        ids = (None, None, None, None)
    socket_path = worker_socket(own_env, rank)
    listens = bool(socket_path) and job_access.listens_on(proc.pid, socket_path)
    rp = RankProcess(proc.pid, rank, local, world, node, command_line(argv), user,
                     socket_path if listens else None, dump_pipe.paths(own_env, rank), *ids)
    rp.entry = user_code.entry_of(argv)
    if socket_path and not listens:
        rp.unused.append(f"{socket_path} (no socket its process, pid {proc.pid}, listens on)")
    return rp


def command_line(argv: list[str]) -> str:
    """A process's command line as attach shows it: secrets cut (a job's --token is not for the terminal)."""
    return " ".join(redact_argv(argv))[:500]


def spawned_ranks(spawned: list, allowed: set[int]) -> list[tuple[psutil.Process, dict, RankProcess, str]]:
    """The ranks of a launcher that gives its workers no rank variable (Lightning's own, launchers/lightning.py):
    its workers grouped by their parent, which is local rank 0 (it set its variables in-process, so its own
    environment has none); N = 1 + the workers it started; a rank is NODE_RANK * N + LOCAL_RANK. A process whose
    parent carries the variables too (a worker's own DataLoader worker) or whose LOCAL_RANK is 0 (local rank 0's
    own helper, started with its in-process variables) is no rank. The parent counts only among ``allowed``."""
    mine = {proc.pid for proc, *_ in spawned}
    by_parent: dict[int, list] = {}
    for item in spawned:
        parent, launcher = _parent_pid(item[0]), by_name(item[4])
        local = env_int(item[1], *launcher.local_rank_vars) if launcher else None
        if parent is not None and parent not in mine and local:
            by_parent.setdefault(parent, []).append((item, launcher, local))
    out = []
    for parent, kids in by_parent.items():
        n = max(1 + len(kids), 1 + max(local for _, _, local in kids))
        first_env = kids[0][0][1]
        for (proc, env, argv, user, name), launcher, local in kids:
            node = env_int(env, *launcher.node_rank_vars) or 0
            rank = node * n + local
            out.append((proc, env, _rank_process(proc, env, env, rank, local, env_int(env, *launcher.size_vars), node,
                                                 argv, user), name))
        first = _first_of(parent, first_env, kids[0][1], n) if parent in allowed else None
        if first is not None:
            out.append(first)
    return out


def _first_of(pid: int, worker_env: dict, launcher, n: int):
    """Local rank 0 of a ``first_is_parent`` launcher: the workers' parent, with the variables it set in-process
    (the job's, as its workers got them) over its own environment."""
    try:
        proc = psutil.Process(pid)
        argv = proc.cmdline()
        own, user = proc.environ(), proc.username()
    except psutil.Error:
        return None
    if not runs_python(proc) or is_ddpdoctor(argv):
        return None
    env = {**own, **{k: v for k, v in worker_env.items() if k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                                                  *launcher.node_rank_vars)}, "LOCAL_RANK": "0"}
    node = env_int(env, *launcher.node_rank_vars) or 0
    rank = node * n
    return (proc, env, _rank_process(proc, env, own, rank, 0, env_int(env, *launcher.size_vars), node, argv, user),
            launcher.name)


def ray_rank(proc: psutil.Process, env: dict, argv: list[str], user: str | None):
    """A Ray Train worker as a rank, its identity from Ray's own record of it (ray_jobs.identity); None when it
    has none yet (Ray has not set its process group up) or it cannot be read (noted)."""
    got = ray_jobs.identity(proc)
    if got is None:
        return None
    title = [" ".join(argv).strip()]  # Ray's title, padded with spaces over the command line it replaced
    rp = _rank_process(proc, env, env, got.rank, got.local_rank, got.world_size, got.node_rank, title, user)
    rp.job, rp.thread, rp.session = got.key, ray.TRAINING_THREAD, got.session
    return proc, env, rp, ray.NAME


def in_own_place(found: list, own_env) -> list:
    """Inside a launcher's job step (``srun --overlap --jobid J ddpdoctor attach``): when ranks of the same job
    are seen, only those on this node count (SLURM_JOB_ID, then SLURMD_NODENAME). One PID namespace can hold
    several nodes' ranks (nodes simulated in network namespaces, containers with the host's PIDs); elsewhere the
    list is kept whole."""
    for launcher in LAUNCHERS:
        names = [v for v in launcher.place_vars if own_env.get(v)]
        if not names or names[0] != launcher.place_vars[0]:
            continue
        job = names[0]
        if any(env.get(job) == own_env[job] for _, env, _, _ in found):
            return [f for f in found if all(f[1].get(v) == own_env[v] for v in names)]
    return found


def is_ddpdoctor(argv: list[str]) -> bool:
    """Whether a command line runs ddpdoctor itself (its console script or ``python -m ddpdoctor``), judged by
    the program run, never by a path that merely contains the name (a venv in /tmp/ddpdoctor-ci.X runs ranks)."""
    script = os.path.basename(argv[1]) if len(argv) > 1 else ""
    if os.path.basename(argv[0] if argv else "") == "ddpdoctor" or script == "ddpdoctor":
        return True
    args = iter(argv[1:])
    for arg in args:  # the interpreter's own options, up to the script or -m MODULE
        if arg == "-m":  # run-trainer's bootstrap runs the job's own script: a rank, not ddpdoctor
            module = next(args, "")
            return module.split(".")[0] == "ddpdoctor" and module != BOOTSTRAP
        if arg in ("-X", "-W"):
            next(args, None)
        elif not arg.startswith("-") or arg == "-c":
            return False
    return False


def worker_socket(env: dict, rank: int) -> str | None:
    """The rank's worker server socket, where run-trainer started the job (DDPDOCTOR_WORKER_SOCKET's template).
    Only a name: discover keeps it when the rank's own process listens there (job_access.listens_on)."""
    template = env.get("DDPDOCTOR_WORKER_SOCKET")
    if not template or "{rank}" not in template:
        return None
    return template.replace("{rank}", str(rank))


def _candidates(only_pids: set[int] | None) -> list[psutil.Process]:
    if only_pids is None:
        return list(psutil.process_iter())
    out = []
    for pid in only_pids:
        try:
            root = psutil.Process(pid)
            out += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return out


def _ancestors() -> list[psutil.Process]:
    try:
        return psutil.Process().parents()
    except psutil.Error:
        return []


def _is_ray_worker(proc: psutil.Process) -> bool:
    try:
        return ray.is_worker(proc.cmdline())
    except psutil.Error:
        return False


def _parent_pid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _same_rank(proc, rp: RankProcess, found) -> bool:
    parent = _parent_pid(proc)
    return any(other.pid == parent and other.rank == rp.rank for _, _, other, _ in found)


def _master(env: dict) -> str | None:
    addr, port = env.get("MASTER_ADDR"), parse_int(env.get("MASTER_PORT"), hi=65535)
    return f"{addr}:{port}" if addr and port is not None else addr


def _find_agent(job: Job) -> None:
    """torchrun's agents: the ranks' parents of the job's own user whose command line is torchrun's."""
    for pid in sorted({rp.parent for rp in job.ranks if rp.parent}):
        try:
            proc = psutil.Process(pid)
            argv, uid, started = proc.cmdline(), proc.uids().effective, proc.create_time()
        except psutil.Error:
            continue
        if uid == job.uid and is_agent(argv):
            job.agents.append((pid, started))
            if job.agent_pid is None:
                job.agent_pid, job.command = pid, command_line(argv)
    if job.agent_pid is None:
        job.command = job.ranks[0].cmdline if job.ranks else ""
