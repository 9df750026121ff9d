"""SLURM (sbatch, srun): node id and count, the job's node list, the processes per node, and its fix."""
from __future__ import annotations

from typing import Mapping

from .base import Context, Launcher, LauncherInfo, VarFamily, env_int
from .hostlists import expand_slurm_nodelist


def present(env: Mapping[str, str]) -> bool:
    return "SLURM_NODEID" in env or "SLURM_JOB_NODELIST" in env


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    nodes = expand_slurm_nodelist(env.get("SLURM_JOB_NODELIST", "")) if env.get("SLURM_JOB_NODELIST") else []
    return LauncherInfo(
        "slurm", env_int(env, "SLURM_NODEID"), env_int(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
        env.get("MASTER_ADDR") or (nodes[0] if nodes else None),
        nproc(env), hosts=nodes or None,
        local_rank=env_int(env, "SLURM_LOCALID"), job_id=env.get("SLURM_JOB_ID"),
    )


def nproc(env: Mapping[str, str]) -> int | None:
    """The training processes a SLURM node starts, where the job says: srun's tasks per node when srun starts
    several (one per GPU, the training itself), else the GPUs the step has on this node. One task per node
    (`srun --ntasks-per-node=1 ddpdoctor preflight`, or `... torchrun --nproc-per-node 8`) says nothing of it:
    taken as 1, healthy 8-GPU nodes were told `torchrun --nproc-per-node 1`."""
    tasks = env_int(env, "SLURM_NTASKS_PER_NODE")
    return tasks if tasks is not None and tasks > 1 else env_int(env, "SLURM_GPUS_ON_NODE")


def fix(command: str) -> str:
    return (f"an sbatch script runs on the first node only: start one per node with "
            f"`srun --ntasks-per-node=1 {command}` (inside a running job: `srun --overlap --jobid JOB "
            f"--ntasks-per-node=1 {command}`)")


LAUNCHER = Launcher(
    "slurm", present, read, fix, started_all=True, host_list="SLURM_JOB_NODELIST",
    rank_vars=("SLURM_PROCID",), local_rank_vars=("SLURM_LOCALID",), size_vars=("SLURM_NTASKS",),
    place_vars=("SLURM_JOB_ID", "SLURMD_NODENAME"), job_id_vars=("SLURM_JOB_ID", "SLURM_JOBID"),
    variables=(
        # srun(1) and sbatch(1), "OUTPUT ENVIRONMENT VARIABLES" (Slurm 22.05, Debian's slurm-wlm man pages;
        # https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES): task/node ids, the node's
        # name and topology address, CPU/GPU/memory lists "for this node", the task's pid.
        # SLURM_LAUNCH_NODE_IPADDR ("where the srun command ran from") and SLURM_SRUN_COMM_HOST/PORT,
        # SLURM_STEP_LAUNCHER_PORT are the launching srun's, one per launch: nodes started by separate sruns (or
        # salloc shells) legitimately differ. SLURM_JOB_CPUS_PER_NODE / SLURM_STEP_NODELIST describe the
        # allocation, kept as before (the job id, which stays compared, already tells two jobs apart).
        VarFamily("SLURM", "srun(1), sbatch(1): OUTPUT ENVIRONMENT VARIABLES", frozenset({
            "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_GTIDS", "SLURMD_NODENAME",
            "SLURM_TOPOLOGY_ADDR", "SLURM_TASK_PID", "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE",
            "SLURM_SHARDS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST",
            "SLURM_MEM_BIND", "SLURM_MEM_BIND_LIST", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST",
            "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT", "SLURM_JOB_CPUS_PER_NODE", "SLURM_STEP_NODELIST",
            # Slurm's PMI2/PMIx plugins (mpi_pmi2, mpi_pmix): per-step-daemon ports and paths
            "SLURM_PMIXP_ABORT_AGENT_PORT", "SLURM_PMIX_MAPPING_SERV",
        })),
    ))
