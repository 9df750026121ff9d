"""Open MPI and MPICH/Hydra (mpiexec, mpirun; PMI/PMIx under srun too): ranks, processes per node, its fix."""
from __future__ import annotations

from typing import Mapping

from .base import Context, Launcher, LauncherInfo, VarFamily, endpoint, env_int

LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK")


def present(env: Mapping[str, str]) -> bool:
    return "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env


def read(env: Mapping[str, str], ctx: Context) -> LauncherInfo:
    size = env_int(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    per_node = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
    if per_node and per_node > 1:
        # several processes per node: nodes = size / processes per node; the node rank is assigned on arrival
        # (MPI's mapping policy decides which rank lands where, not a rule we can rely on)
        return LauncherInfo("mpi", None, (size // per_node) if size else None, endpoint(env))
    return LauncherInfo("mpi", env_int(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK"), size, endpoint(env))


def fix(command: str) -> str:
    return f"start one process per node: `mpiexec --map-by ppr:1:node {command}` (check the host file and -n)"


LAUNCHER = Launcher(
    "mpi", present, read, fix, started_all=True,
    rank_vars=("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"), local_rank_vars=LOCAL_RANK_VARS,
    size_vars=("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"), job_id_vars=("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"),
    variables=(
        # Open MPI, "Environment variables set for MPI applications"
        # (https://docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html): OMPI_COMM_WORLD_RANK,
        # _LOCAL_RANK, _LOCAL_SIZE ("ranks of this job running on this node": differs with uneven placement),
        # _NODE_RANK. Open MPI 4.x's launcher (ORTE) also hands each process its own name and session: the vpid,
        # node rank, local daemon URI, and file/session locations (odls_base_default_fns.c; all seen differing
        # per node under a real mpiexec across tests/slurm_cluster.py's namespaces, none else did).
        VarFamily("Open MPI", "docs.open-mpi.org: Environment variables set for MPI applications", frozenset({
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
            "OMPI_COMM_WORLD_NODE_RANK", "OMPI_MCA_ess_base_vpid", "OMPI_MCA_orte_ess_node_rank",
            "OMPI_MCA_orte_local_daemon_uri", "OMPI_FILE_LOCATION", "OMPI_MCA_orte_top_session_dir",
            "OMPI_MCA_orte_jobfam_session_dir", "OMPI_MCA_initial_wdir",
        })),
        # PMIx Standard v4, "Environment variables" for clients: PMIX_RANK, PMIX_ID, PMIX_HOSTNAME, and the local
        # server's rendezvous (PMIX_SERVER_URI*, PMIX_SERVER_TMPDIR, PMIX_SYSTEM_TMPDIR, the shared-memory
        # store's PMIX_DSTORE_*_BASE_PATH): one server per node.
        VarFamily("PMIx", "PMIx Standard: client environment (PMIx_Init)", frozenset({
            "PMIX_RANK", "PMIX_ID", "PMIX_HOSTNAME", "PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR", "PMIX_SERVER_URI",
        }), prefixes=("PMIX_SERVER_URI", "PMIX_DSTORE_")),
        # PMI-1/PMI-2 wire protocol as MPICH's Hydra and Slurm's mpi/pmi2 set it (MPICH "Using the Hydra Process
        # Manager"; Intel MPI Developer Reference): the rank, the fd or host:port of the local proxy, and
        # MPICH's node-local rank/count (MPI_LOCALRANKID, MPI_LOCALNRANKS).
        VarFamily("PMI / MPICH Hydra", "MPICH Hydra process manager; Intel MPI Developer Reference", frozenset({
            "PMI_RANK", "PMI_ID", "PMI_FD", "PMI_PORT", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
        })),
    ))
