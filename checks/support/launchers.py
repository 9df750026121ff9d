"""Launcher variables: what each launcher sets differently on every node (or every process) by nature, taken
from the launcher's own documentation, so a node's identity is never reported as configuration drift.

One entry per launcher: its per-node variable names, and whole families where the launcher documents a family
(a per-server URI, a per-node list). Everything a launcher sets the same on every node (job id, node count,
node list, master address...) is NOT here: a difference there means the nodes are not in the same job, which
is worth saying. Variables a person sets (NCCL_*, OMP_NUM_THREADS, OMPI_MCA_btl_*...) must agree and are never
listed. ``per_node(name)`` says which launcher owns a name; ``env-vars`` leaves those out of its comparables.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Launcher:
    name: str
    source: str  # the documentation the names come from
    names: frozenset[str]
    prefixes: tuple[str, ...] = ()  # documented families whose every member is per node

    def owns(self, var: str) -> bool:
        return var in self.names or (bool(self.prefixes) and var.startswith(self.prefixes))


LAUNCHERS: tuple[Launcher, ...] = (
    # srun(1) and sbatch(1), "OUTPUT ENVIRONMENT VARIABLES" (Slurm 22.05, Debian's slurm-wlm man pages;
    # https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES): task/node ids, the node's name
    # and topology address, CPU/GPU/memory lists "for this node", the task's pid. SLURM_LAUNCH_NODE_IPADDR
    # ("where the srun command ran from") and SLURM_SRUN_COMM_HOST/PORT, SLURM_STEP_LAUNCHER_PORT are the
    # launching srun's, one per launch: nodes started by separate sruns (or salloc shells) legitimately differ.
    # SLURM_JOB_CPUS_PER_NODE / SLURM_STEP_NODELIST describe the allocation, kept as before (the job id, which
    # stays compared, already tells two jobs apart).
    Launcher("SLURM", "srun(1), sbatch(1): OUTPUT ENVIRONMENT VARIABLES", frozenset({
        "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_GTIDS", "SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR",
        "SLURM_TASK_PID", "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE", "SLURM_SHARDS_ON_NODE", "SLURM_JOB_GPUS",
        "SLURM_STEP_GPUS", "SLURM_CPU_BIND", "SLURM_CPU_BIND_LIST", "SLURM_MEM_BIND", "SLURM_MEM_BIND_LIST",
        "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT",
        "SLURM_JOB_CPUS_PER_NODE", "SLURM_STEP_NODELIST",
        # Slurm's PMI2/PMIx plugins (mpi_pmi2, mpi_pmix): per-step-daemon ports and paths
        "SLURM_PMIXP_ABORT_AGENT_PORT", "SLURM_PMIX_MAPPING_SERV",
    })),
    # PBS Pro Reference Guide, "PBS Environment Variables", and pbsdsh(1) (Torque/OpenPBS): "PBS_TASKNUM,
    # PBS_NODENUM and PBS_VNODENUM ... contain the TM task id, the node identifier, and the cpu (virtual node)
    # identifier"; PBS_MOMPORT is the local MoM's.
    Launcher("PBS", "PBS Pro Reference Guide: PBS environment variables; pbsdsh(1)", frozenset({
        "PBS_TASKNUM", "PBS_NODENUM", "PBS_VNODENUM", "PBS_MOMPORT",
    })),
    # Open MPI, "Environment variables set for MPI applications"
    # (https://docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html): OMPI_COMM_WORLD_RANK,
    # _LOCAL_RANK, _LOCAL_SIZE ("ranks of this job running on this node": differs with uneven placement),
    # _NODE_RANK. Open MPI 4.x's launcher (ORTE) also hands each process its own name and session: the vpid,
    # node rank, local daemon URI, and file/session locations (odls_base_default_fns.c; all seen differing
    # per node under a real mpiexec across tests/slurm_cluster.py's namespaces, none else did).
    Launcher("Open MPI", "docs.open-mpi.org: Environment variables set for MPI applications", frozenset({
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
        "OMPI_COMM_WORLD_NODE_RANK", "OMPI_MCA_ess_base_vpid", "OMPI_MCA_orte_ess_node_rank",
        "OMPI_MCA_orte_local_daemon_uri", "OMPI_FILE_LOCATION", "OMPI_MCA_orte_top_session_dir",
        "OMPI_MCA_orte_jobfam_session_dir", "OMPI_MCA_initial_wdir",
    })),
    # PMIx Standard v4, "Environment variables" for clients: PMIX_RANK, PMIX_ID, PMIX_HOSTNAME, and the local
    # server's rendezvous (PMIX_SERVER_URI*, PMIX_SERVER_TMPDIR, PMIX_SYSTEM_TMPDIR, the shared-memory
    # store's PMIX_DSTORE_*_BASE_PATH): one server per node.
    Launcher("PMIx", "PMIx Standard: client environment (PMIx_Init)", frozenset({
        "PMIX_RANK", "PMIX_ID", "PMIX_HOSTNAME", "PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR", "PMIX_SERVER_URI",
    }), prefixes=("PMIX_SERVER_URI", "PMIX_DSTORE_")),
    # PMI-1/PMI-2 wire protocol as MPICH's Hydra and Slurm's mpi/pmi2 set it (MPICH "Using the Hydra Process
    # Manager"; Intel MPI Developer Reference): the rank, the fd or host:port of the local proxy, and
    # MPICH's node-local rank/count (MPI_LOCALRANKID, MPI_LOCALNRANKS).
    Launcher("PMI / MPICH Hydra", "MPICH Hydra process manager; Intel MPI Developer Reference", frozenset({
        "PMI_RANK", "PMI_ID", "PMI_FD", "PMI_PORT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    })),
    # torchrun (https://docs.pytorch.org/docs/stable/elastic/run.html#environment-variables): LOCAL_RANK, RANK,
    # GROUP_RANK (the node's rank), ROLE_RANK, LOCAL_WORLD_SIZE (this node's --nproc-per-node: nodes with
    # different GPU counts legitimately differ), TORCHELASTIC_ERROR_FILE (one file per worker); the agent's
    # per-node timer pipe.
    Launcher("torchrun", "PyTorch docs: torchrun, Environment Variables", frozenset({
        "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE",
        "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_TIMER_FILE",
    })),
    # Kubernetes: every pod's HOSTNAME; indexed Jobs expose the pod's index as JOB_COMPLETION_INDEX
    # (kubernetes.io, "Indexed Job for Parallel Processing"); JobSet adds the job's index within its
    # replicated job (JOB_INDEX, jobset.sigs.k8s.io); Kubeflow's PyTorchJob sets RANK per pod and passes torchrun's
    # arguments as PET_* (PET_NODE_RANK per pod); the NVIDIA device plugin gives each container its own
    # NVIDIA_VISIBLE_DEVICES (GPU UUIDs), like CUDA_VISIBLE_DEVICES under a GPU-aware scheduler.
    Launcher("Kubernetes", "kubernetes.io Indexed Jobs; JobSet; Kubeflow PyTorchJob; NVIDIA device plugin",
             frozenset({"HOSTNAME", "JOB_COMPLETION_INDEX", "JOB_INDEX", "JOB_GLOBAL_INDEX", "PET_NODE_RANK",
                        "PET_LOCAL_ADDR", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})),
)


def per_node(var: str) -> str | None:
    """The launcher that sets ``var`` per node or per process (None: the variable must agree across nodes)."""
    for launcher in LAUNCHERS:
        if launcher.owns(var):
            return launcher.name
    return None
