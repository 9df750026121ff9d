"""A launcher's own per-node variables are never drift (checks/support/launchers.py): for each launcher, three
nodes with the variables as that launcher documents and sets them produce no parity finding, and a real drift
beside them (an NCCL_* setting on one node) is still found."""
from __future__ import annotations

import pytest
from ddpdoctor_checks.env_vars import EnvVarsCheck, wanted
from ddpdoctor_checks.parity import ParityCheck
from ddpdoctor_checks.support.launchers import LAUNCHERS, per_node

from ddpdoctor.api import Level
from ddpdoctor.redaction import redact_env


def slurm(i: int) -> dict:
    """srun -N3 --ntasks-per-node=1 --gpus-per-node=2, as seen on a real Slurm 22.05 cluster (tests/slurm_cluster)."""
    return {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "node[1-3]",
            "SLURM_STEP_NODELIST": "node[1-3]", "SLURM_NTASKS": "3", "SLURM_TASKS_PER_NODE": "1(x3)",
            "SLURM_NODEID": str(i), "SLURM_PROCID": str(i), "SLURM_LOCALID": "0", "SLURM_GTIDS": str(i),
            "SLURMD_NODENAME": f"node{i + 1}", "SLURM_TOPOLOGY_ADDR": f"node{i + 1}", "SLURM_TASK_PID": str(1000 + 7 * i),
            "SLURM_CPUS_ON_NODE": str(32 + 16 * i), "SLURM_JOB_CPUS_PER_NODE": "32,48,64",
            "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_GPUS": f"{2 * i},{2 * i + 1}", "SLURM_STEP_GPUS": f"{2 * i},{2 * i + 1}",
            "SLURM_CPU_BIND": f"quiet,mask_cpu:0x{i + 1:x}", "SLURM_CPU_BIND_LIST": f"0x{i + 1:x}",
            "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1", "SLURM_SRUN_COMM_PORT": "38515",
            "CUDA_VISIBLE_DEVICES": "0,1"}


def pbs(i: int) -> dict:
    return {"PBS_JOBID": "77.pbs", "PBS_NODEFILE": "/var/spool/pbs/aux/77.pbs", "PBS_O_WORKDIR": "/home/u",
            "PBS_TASKNUM": str(i + 1), "PBS_NODENUM": str(i), "PBS_VNODENUM": str(i * 8), "PBS_MOMPORT": "15003"}


def openmpi(i: int) -> dict:
    # uneven placement (-np 5 over 3 hosts: 2,2,1): the local size differs per node by nature
    return {"OMPI_COMM_WORLD_SIZE": "5", "OMPI_UNIVERSE_SIZE": "5", "OMPI_COMM_WORLD_RANK": str(2 * i),
            "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1" if i == 2 else "2",
            "OMPI_COMM_WORLD_NODE_RANK": "0", "OMPI_MCA_ess_base_vpid": str(2 * i),
            "OMPI_MCA_orte_ess_node_rank": "0", "OMPI_MCA_orte_local_daemon_uri": f"123.{i};tcp://10.0.0.{i + 1}:4444",
            "OMPI_FILE_LOCATION": f"/tmp/ompi.node{i + 1}.0/jf.1/{2 * i}", "OMPI_MCA_ess_base_jobid": "1234",
            "OMPI_MCA_btl_tcp_if_include": "eth0"}


def pmix(i: int) -> dict:
    return {"PMIX_RANK": str(i), "PMIX_NAMESPACE": "slurm.pmix.42.0", "PMIX_ID": f"slurm.pmix.42.0.{i}",
            "PMIX_HOSTNAME": f"node{i + 1}", "PMIX_SERVER_URI41": f"pmix-server.{100 + i};tcp4://127.0.0.1:{4000 + i}",
            "PMIX_SERVER_URI4": f"pmix-server.{100 + i};tcp4://127.0.0.1:{4000 + i}",
            "PMIX_SERVER_TMPDIR": f"/var/spool/slurmd/node{i + 1}/pmix.42.0", "PMIX_VERSION": "4.2.2"}


def pmi_hydra(i: int) -> dict:
    return {"PMI_RANK": str(i), "PMI_SIZE": "3", "PMI_FD": str(6 + i), "PMI_PORT": f"node{i + 1}:{40000 + i}",
            "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}


def torchrun(i: int) -> dict:
    # heterogeneous nodes (4, 2 and 2 GPUs): LOCAL_WORLD_SIZE is each node's own --nproc-per-node
    return {"RANK": str(4 * i), "LOCAL_RANK": "0", "GROUP_RANK": str(i), "ROLE_RANK": str(4 * i),
            "LOCAL_WORLD_SIZE": "4" if i == 0 else "2", "WORLD_SIZE": "8", "ROLE_WORLD_SIZE": "8",
            "MASTER_ADDR": "node1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job7",
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_ERROR_FILE": f"/tmp/torchelastic_{i}/attempt_0/0/error.json"}


def kubernetes(i: int) -> dict:
    # a Kubeflow PyTorchJob / JobSet pod of an indexed Job, GPUs from the NVIDIA device plugin
    return {"HOSTNAME": f"train-worker-{i}", "JOB_COMPLETION_INDEX": str(i), "JOB_INDEX": str(i),
            "PET_NODE_RANK": str(i), "PET_NNODES": "3", "PET_NPROC_PER_NODE": "8", "RANK": str(i),
            "WORLD_SIZE": "3", "MASTER_ADDR": "train-master-0", "MASTER_PORT": "23456",
            "NVIDIA_VISIBLE_DEVICES": f"GPU-{i}a,GPU-{i}b"}


LAUNCHER_ENVS = {"SLURM": slurm, "PBS": pbs, "Open MPI": openmpi, "PMIx": pmix, "PMI / MPICH Hydra": pmi_hydra,
                 "torchrun": torchrun, "Kubernetes": kubernetes}


def env_node(env: dict) -> dict:
    """One node's parity input: the env-vars check's facts as gather() builds them, and its comparables."""
    facts = {"vars": dict(sorted(redact_env({k: v for k, v in env.items() if wanted(k)}).items()))}
    return {"ddpdoctor": "0.1.0", "checks": ["env-vars", "parity"],
            "comparable": {"env-vars": EnvVarsCheck().comparable(facts)}}


def findings(envs: list[dict]):
    nodes = {f"node{i + 1}": env_node(e) for i, e in enumerate(envs)}
    res = ParityCheck().compare(nodes, ParityCheck().with_defaults({}))
    return [r for r in res if r.level in (Level.WARN, Level.FAIL)]


def test_every_launcher_has_an_example():
    assert set(LAUNCHER_ENVS) == {launcher.name for launcher in LAUNCHERS}


@pytest.mark.parametrize("launcher", sorted(LAUNCHER_ENVS))
def test_launcher_per_node_variables_are_not_drift(launcher):
    make = LAUNCHER_ENVS[launcher]
    common = {"NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "8"}
    envs = [{**common, **make(i)} for i in range(3)]
    assert findings(envs) == [], [r.summary for r in findings(envs)]
    # every variable that differs between the nodes is that launcher's own
    differing = {k for k in envs[0] if len({e.get(k) for e in envs}) > 1}
    assert differing and all(per_node(k) is not None for k in differing), differing
    # and a real drift beside them is still found, on the node that has it
    envs[1]["NCCL_IB_HCA"] = "mlx4"
    (drift,) = findings(envs)
    assert drift.nodes == ["node2"] and "NCCL_IB_HCA" in drift.summary


def test_settings_a_person_makes_stay_comparable():
    for name in ("NCCL_SOCKET_NTHREADS", "OMPI_MCA_btl_tcp_if_include", "SLURM_JOB_ID", "SLURM_NNODES",
                 "WORLD_SIZE", "MASTER_ADDR", "OMP_NUM_THREADS", "TORCHELASTIC_RUN_ID", "PMI_SIZE"):
        assert per_node(name) is None, name
    assert per_node("PMIX_SERVER_URI41") == "PMIx" and per_node("SLURM_GTIDS") == "SLURM"
