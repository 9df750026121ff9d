"""Which process is a launcher's agent, never a rank: torchrun, `accelerate launch`, mpirun's daemons, srun; and
which is a launcher's own process, never a rank either (Ray's daemons and its workers but a training worker's).

A rank is a process that runs the user's script with a rank identity and no rank children of its own. An agent
is walked through to the ranks it starts, whatever rank variable it inherited: under `srun torchrun` each torchrun
has srun's SLURM_PROCID (0 on node 0, 1 on node 1, ...), which reads like a rank's. Two rules, each enough:
- its program is a launcher's (``is_agent``): torchrun, python -m torch.distributed.run/launch, accelerate's
  launch, mpirun/mpiexec/orted/prted, srun/slurmstepd; told by the program run, never by a path that merely
  contains the name (a user's /home/u/torchrun-tests/train.py is a rank);
- it started ranks whose rank identity it does not have itself (``starts_ranks``): a launcher the table does not
  name. A forked child (a DataLoader worker) carries its parent's environment whole and is no sign; nor are the
  workers of a launcher whose first rank is their parent (Lightning's own: its local rank 0 runs the script).
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping

from . import ray

AGENT_PROGRAMS = frozenset({"torchrun", "accelerate-launch", "mpirun", "mpiexec", "orterun", "orted", "prted",
                            "prterun", "srun", "slurmstepd"})
AGENT_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch"})
# a program whose subcommand is the launcher: `accelerate launch train.py`
AGENT_SUBCOMMANDS = {"accelerate": "launch"}
# the interpreter's options that take a value (python -X dev -W ignore -m torch.distributed.run)
_VALUED = ("-X", "-W", "--check-hash-based-pycs")


def program(argv: list[str]) -> tuple[str, str | None]:
    """(the program run, its first argument): a script's or console script's base name, or ``-m MODULE``'s
    module, past the interpreter and its options."""
    if not argv:
        return "", None
    name = os.path.basename(argv[0])
    if not name.startswith("python"):
        return name, argv[1] if len(argv) > 1 else None
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, ""), next(args, None)
        if arg in _VALUED:
            next(args, None)
        elif arg == "-c":
            return "-c", None
        elif not arg.startswith("-"):
            return os.path.basename(arg), next(args, None)
    return name, None


def is_agent(argv: list[str]) -> bool:
    """The program run is a launcher's agent (torchrun, accelerate launch, mpirun's, srun's)."""
    name, first = program(argv)
    if name in AGENT_PROGRAMS or name in AGENT_MODULES:
        return True
    return AGENT_SUBCOMMANDS.get(name) is not None and first == AGENT_SUBCOMMANDS[name]


def never_rank(argv: list[str]) -> bool:
    """A launcher's agent, or a launcher's own process that runs no rank: Ray's raylet, GCS, dashboard, idle
    pooled workers and actors other than a training worker (launchers/ray.py). Such a process may inherit a
    scheduler's rank variable (Ray started under srun); it is walked through, never read as a rank."""
    return is_agent(argv) or ray.is_own_process(argv)


def starts_ranks(own: Mapping[str, str], children: Iterable[Mapping[str, str]], rank_vars: Iterable[str]) -> bool:
    """A process whose children carry a rank identity it does not have (another value of a rank variable, or one
    it lacks) started them: a launcher's agent. A forked child's environment is its parent's, whole."""
    names = tuple(rank_vars)
    mine = {v: own.get(v) for v in names}
    return any(any(child.get(v) is not None and child.get(v) != mine[v] for v in names) for child in children)
