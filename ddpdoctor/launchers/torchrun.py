"""torchrun (torch.distributed.elastic): its workers' environment, the node rank and count it gives, its fix."""
from __future__ import annotations

from typing import Mapping

from .base import Context, Launcher, LauncherInfo, VarFamily, endpoint, env_int, nnodes_from_world


def present(env: Mapping[str, str]) -> bool:
    # NODE_RANK alone is a user's variable, not torchrun's
    return "GROUP_RANK" in env or ("NODE_RANK" in env and "TORCHELASTIC_RUN_ID" in env)


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    return LauncherInfo(
        "torchrun", env_int(env, "GROUP_RANK", "NODE_RANK"),
        env_int(env, "GROUP_WORLD_SIZE") or nnodes_from_world(env),
        endpoint(env), env_int(env, "LOCAL_WORLD_SIZE"), local_rank=env_int(env, "LOCAL_RANK"),
        job_id=env.get("TORCHELASTIC_RUN_ID"),
    )


def fix(command: str) -> str:
    return ("start torchrun on every node with identical --nnodes, --rdzv-endpoint and --rdzv-id (the "
            "scheduler's job id, never $RANDOM)")


LAUNCHER = Launcher(
    "torchrun", present, read, fix, rank_vars=("RANK",), local_rank_vars=("LOCAL_RANK",), size_vars=("WORLD_SIZE",),
    variables=(
        # torchrun (https://docs.pytorch.org/docs/stable/elastic/run.html#environment-variables): LOCAL_RANK, RANK,
        # GROUP_RANK (the node's rank), ROLE_RANK, LOCAL_WORLD_SIZE (this node's --nproc-per-node: nodes with
        # different GPU counts legitimately differ), TORCHELASTIC_ERROR_FILE (one file per worker); the agent's
        # per-node timer pipe.
        VarFamily("torchrun", "PyTorch docs: torchrun, Environment Variables", frozenset({
            "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE",
            "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_TIMER_FILE",
        })),
    ))
