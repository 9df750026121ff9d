"""Kubernetes: Kubeflow PyTorchJob (PET_* for torchrun-style jobs, else one pod per node with RANK/WORLD_SIZE),
JobSet and indexed Jobs (JOB_COMPLETION_INDEX is the pod's index: the node rank)."""
from __future__ import annotations

from typing import Mapping

from ..numbers import parse_int
from .base import Context, Launcher, LauncherInfo, VarFamily, env_int


def present(env: Mapping[str, str]) -> bool:
    return "KUBERNETES_SERVICE_HOST" in env and any(k in env for k in ("PET_NNODES", "JOB_COMPLETION_INDEX", "RANK"))


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    nnodes = parse_int(env.get("PET_NNODES", "").split(":")[-1])  # "2" or elastic "1:4"
    if nnodes is None and "JOB_COMPLETION_INDEX" not in env:
        nnodes = env_int(env, "WORLD_SIZE")
    rank = env_int(env, "PET_NODE_RANK", "JOB_COMPLETION_INDEX")
    if rank is None and "PET_NNODES" not in env:
        rank = env_int(env, "RANK")
    addr = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR")
    port = env.get("PET_MASTER_PORT") or env.get("MASTER_PORT")
    master = f"{addr}:{port}" if addr and port else addr
    return LauncherInfo("kubernetes", rank, nnodes, master, env_int(env, "PET_NPROC_PER_NODE"))


def fix(command: str) -> str:
    return ("the pods of the missing ranks are not running or cannot reach the master's service: "
            "`kubectl get pods -o wide` and check the headless service / MASTER_ADDR")


LAUNCHER = Launcher(
    "kubernetes", present, read, fix, rank_vars=("RANK",), local_rank_vars=("LOCAL_RANK",), size_vars=("WORLD_SIZE",),
    variables=(
        # Kubernetes: every pod's HOSTNAME; indexed Jobs expose the pod's index as JOB_COMPLETION_INDEX
        # (kubernetes.io, "Indexed Job for Parallel Processing"); JobSet adds the job's index within its
        # replicated job (JOB_INDEX, jobset.sigs.k8s.io); Kubeflow's PyTorchJob sets RANK per pod and passes
        # torchrun's arguments as PET_* (PET_NODE_RANK per pod); the NVIDIA device plugin gives each container its
        # own NVIDIA_VISIBLE_DEVICES (GPU UUIDs), like CUDA_VISIBLE_DEVICES under a GPU-aware scheduler.
        VarFamily("Kubernetes", "kubernetes.io Indexed Jobs; JobSet; Kubeflow PyTorchJob; NVIDIA device plugin",
                  frozenset({"HOSTNAME", "JOB_COMPLETION_INDEX", "JOB_INDEX", "JOB_GLOBAL_INDEX", "PET_NODE_RANK",
                             "PET_LOCAL_ADDR", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})),
    ))
