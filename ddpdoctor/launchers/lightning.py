"""Lightning's own launcher (a Trainer or Fabric with devices=N, started as `python train.py`, no torchrun or
scheduler): the user's process is local rank 0 and sets MASTER_ADDR/PORT, NODE_RANK, LOCAL_RANK and WORLD_SIZE
in its own os.environ (so its /proc environment holds none of them), then starts the same script again for local
ranks 1..N-1 with those variables and no RANK (lightning/fabric/strategies/launchers/subprocess_script.py,
Lightning 2.x). A rank is NODE_RANK * N + LOCAL_RANK; attach finds local rank 0 as the others' parent."""
from __future__ import annotations

from typing import Mapping

from .base import Context, Launcher, LauncherInfo, endpoint, env_int


def present(env: Mapping[str, str]) -> bool:
    # torchrun's and a scheduler's workers carry RANK (torchrun also GROUP_RANK); Lightning's children carry none
    return all(v in env for v in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_PORT")) and not any(
        v in env for v in ("RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID"))


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    return LauncherInfo("lightning", env_int(env, "NODE_RANK"), None, endpoint(env),
                        local_rank=env_int(env, "LOCAL_RANK"))


def fix(command: str) -> str:
    return ("start the script on every node with the same MASTER_ADDR and MASTER_PORT and that node's NODE_RANK "
            "(Lightning's launcher starts a node's other processes itself), or start it with torchrun or srun")


LAUNCHER = Launcher("lightning", present, read, fix, local_rank_vars=("LOCAL_RANK",), size_vars=("WORLD_SIZE",),
                    node_rank_vars=("NODE_RANK",), first_is_parent=True)
