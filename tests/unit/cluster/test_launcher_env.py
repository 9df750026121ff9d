"""Unit tests of ddpdoctor/cluster/launcher_env.py."""
from __future__ import annotations

import pytest

from ddpdoctor.cluster import launcher_env
from ddpdoctor.cluster import launcher_env as le
from ddpdoctor.cluster.local import free_port
from ddpdoctor.cluster.roster import missing_message
from tests.unit.helpers import run_cli


def test_launcher_environments():
    tr = launcher_env.from_env({"GROUP_RANK": "2", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "n0",
                                "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"})
    assert (tr.source, tr.node_rank, tr.nnodes, tr.master, tr.nproc_per_node) == ("torchrun", 2, 2, "n0:29500", 8)
    sl = launcher_env.from_env({"SLURM_NODEID": "1", "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "gpu[07-09]"})
    assert (sl.source, sl.node_rank, sl.nnodes, sl.master) == ("slurm", 1, 3, "gpu07")
    pbs = launcher_env.from_env({"PBS_NODEFILE": "/f"}, read_file=lambda p: "a.x\na.x\nb.x\nc.x\n", hostname="b")
    assert (pbs.source, pbs.node_rank, pbs.nnodes, pbs.master) == ("pbs", 1, 3, "a.x")
    mpi = launcher_env.from_env({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"})
    assert (mpi.source, mpi.node_rank, mpi.nnodes) == ("mpi", 3, 4)
    assert launcher_env.from_env({}).source is None


@pytest.mark.parametrize("text,hosts", [
    ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
    ("a1,b[8-10]", ["a1", "b8", "b9", "b10"]),
    ("node[001-002]-ib", ["node001-ib", "node002-ib"]),
])
def test_slurm_nodelists(text, hosts):
    assert launcher_env.expand_slurm_nodelist(text) == hosts


def test_launcher_precedence_and_fallbacks():
    both = {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "4", "SLURM_NODEID": "3", "SLURM_NNODES": "4"}
    assert launcher_env.from_env(both).source == "torchrun"  # the torchrun worker inside an srun job
    assert launcher_env.from_env(both).node_rank == 1 and launcher_env.from_env(both).nnodes == 4
    # NODE_RANK alone is a user's variable, not torchrun's.
    assert launcher_env.from_env({"NODE_RANK": "1"}).source is None
    mpich = launcher_env.from_env({"PMI_RANK": "2", "PMI_SIZE": "5", "MASTER_ADDR": "h0"})
    assert (mpich.source, mpich.node_rank, mpich.nnodes, mpich.master) == ("mpi", 2, 5, "h0")
    sl = launcher_env.from_env({"SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "a[1-2]",
                                "MASTER_ADDR": "a2"})
    assert (sl.nnodes, sl.master) == (2, "a2")  # an explicit MASTER_ADDR wins over the first listed host
    pbs = launcher_env.from_env({"PBS_NODEFILE": "/f", "PBS_NODENUM": "2"}, read_file=lambda p: "x\ny\nz\n",
                                hostname="elsewhere")
    assert (pbs.node_rank, pbs.nnodes, pbs.master) == (2, 3, "x")

    def unreadable(path):
        raise OSError("gone")

    assert launcher_env.from_env({"PBS_NODEFILE": "/f"}, read_file=unreadable).nnodes is None


def test_slurm_nodelist_with_two_bracket_groups():
    assert launcher_env.expand_slurm_nodelist("rack[1-2]-node[01-02]") == [
        "rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]


PBS_NODEFILE = "gpu-a01.cluster\ngpu-a01.cluster\ngpu-a02.cluster\ngpu-a02.cluster\ngpu-a03.cluster\n"


def test_pbs_node_file_gives_hosts_rank_and_job_id():
    env = {"PBS_NODEFILE": "/var/spool/pbs/aux/123.pbs", "PBS_JOBID": "123.pbs", "PBS_O_WORKDIR": "/home/u"}
    info = le.from_env(env, read_file=lambda p: PBS_NODEFILE, hostname="gpu-a02")
    assert (info.source, info.node_rank, info.nnodes, info.master) == ("pbs", 1, 3, "gpu-a01.cluster")
    assert info.hosts == ["gpu-a01.cluster", "gpu-a02.cluster", "gpu-a03.cluster"] and info.job_id == "123.pbs"


def test_slurm_lists_hosts_and_local_id_picks_one_speaker():
    env = {"SLURM_JOB_ID": "991", "SLURM_NODEID": "1", "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "gpu[07-10]",
           "SLURM_LOCALID": "3", "SLURM_NTASKS_PER_NODE": "8"}
    info = le.from_env(env)
    assert (info.source, info.node_rank, info.nnodes, info.master) == ("slurm", 1, 4, "gpu07")
    assert info.hosts == ["gpu07", "gpu08", "gpu09", "gpu10"] and info.local_rank == 3 and info.job_id == "991"


def test_openmpi_with_four_processes_per_node_counts_nodes_not_processes():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
    info = le.from_env(env)
    assert (info.source, info.nnodes, info.node_rank, info.local_rank) == ("mpi", 4, None, 1)
    one_per_node = le.from_env({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                                "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"})
    assert (one_per_node.node_rank, one_per_node.nnodes, one_per_node.local_rank) == (2, 4, 0)


def test_mpiexec_inside_a_pbs_job_still_has_one_speaker_per_node():
    env = {"PBS_NODEFILE": "/f", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "6",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    info = le.from_env(env, read_file=lambda p: PBS_NODEFILE, hostname="gpu-a02")
    assert info.source == "pbs" and info.local_rank == 1  # this process stays silent; local rank 0 speaks


def test_mpich_hydra():
    info = le.from_env({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1",
                        "MASTER_ADDR": "n0"})
    assert (info.source, info.node_rank, info.nnodes, info.local_rank) == ("mpi", 1, 2, 0)


def test_kubernetes_pytorchjob_elastic_and_plain_and_indexed_jobs():
    k8s = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_PORT": "tcp://10.96.0.1:443"}
    elastic = le.from_env({**k8s, "PET_NNODES": "1:4", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "8",
                           "PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"})
    assert (elastic.source, elastic.nnodes, elastic.node_rank, elastic.master, elastic.nproc_per_node) == \
        ("kubernetes", 4, 2, "job-master-0:23456", 8)
    plain = le.from_env({**k8s, "RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"})
    assert (plain.source, plain.nnodes, plain.node_rank, plain.master) == ("kubernetes", 3, 1, "job-master-0:23456")
    indexed = le.from_env({**k8s, "JOB_COMPLETION_INDEX": "5", "MASTER_ADDR": "trainer-0.svc"})
    assert (indexed.source, indexed.node_rank, indexed.nnodes, indexed.master) == ("kubernetes", 5, None, "trainer-0.svc")


def test_torchrun_worker_inside_kubernetes_is_torchrun():
    env = {"KUBERNETES_SERVICE_HOST": "x", "GROUP_RANK": "1", "LOCAL_RANK": "2", "WORLD_SIZE": "16",
           "LOCAL_WORLD_SIZE": "8", "RANK": "10", "TORCHELASTIC_RUN_ID": "j"}
    info = le.from_env(env)
    assert (info.source, info.node_rank, info.nnodes, info.local_rank) == ("torchrun", 1, 2, 2)


def test_hosts_list_gives_rank_by_place():
    info = le.from_hosts(["n1", "n2.lab", "n3"], "n2", None)
    assert (info.source, info.node_rank, info.nnodes, info.master) == ("hosts", 1, 3, "n1")


@pytest.mark.parametrize("launcher, hosts, needles", [
    ("pbs", ["gpu-a01.cluster", "gpu-a02.cluster", "gpu-a03.cluster"],
     ["host(s) gpu-a[02-03].cluster", "PBS_NODEFILE", "pbsdsh", "ppr:1:node"]),
    ("slurm", ["gpu07", "gpu08"], ["host(s) gpu08", "SLURM_JOB_NODELIST", "srun --ntasks-per-node=1"]),
    ("hosts", ["a", "b"], ["host(s) b", "--hosts", "ssh HOST"]),
    ("kubernetes", None, ["kubectl get pods"]),
    ("torchrun", None, ["identical --nnodes", "never $RANDOM"]),
])
def test_missing_nodes_are_named_by_host_with_the_launchers_own_fix(launcher, hosts, needles):
    first = (hosts or ["gpu-a01"])[0].split(".")[0]
    msg = missing_message(present=[0], missing=[1, 2], idents=[{"host": first, "addr": "10.0.0.1", "rank": 0,
                                                                  "claim": 1}],
                          endpoint="10.0.0.1:29500", nnodes=3, timeout=20, hosts=hosts, launcher=launcher)
    for needle in needles:
        assert needle in msg, msg


@pytest.mark.parametrize("launcher", ["slurm", "pbs", "mpi"])
def test_when_other_nodes_joined_the_launcher_started_them_all_and_the_fix_is_the_missing_nodes_route(launcher):
    """srun started three nodes, one could not reach the master (its firewall): no 'sbatch runs on the first
    node only' advice, which would send the user the wrong way."""
    idents = [{"host": h, "addr": f"10.0.0.{i + 1}", "rank": i, "claim": 1} for i, h in enumerate(["n1", "n2"])]
    msg = missing_message(present=[0, 1], missing=[2], idents=idents, endpoint="n1:29500", nnodes=3, timeout=20,
                          hosts=["n1", "n2", "n3"], launcher=launcher)
    assert "host(s) n3" in msg and "never reached n1:29500: check their firewall" in msg, msg
    assert "first node only" not in msg and "srun" not in msg


def test_pbs_job_whose_script_runs_on_the_first_node_only(tmp_path):
    """The Olivia/EAP guide's setup: the head node waits, then names the host that never came and says why."""
    import socket

    nodefile = tmp_path / "nodes"
    nodefile.write_text(f"{socket.gethostname()}\n{socket.gethostname()}\nnode-b.cluster\nnode-b.cluster\n")
    env = {"PATH": "/usr/bin:/bin", "PBS_NODEFILE": str(nodefile), "PBS_JOBID": "77.pbs",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    import os

    env.update({k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "VIRTUAL_ENV", "HOME"))})
    out = run_cli("preflight", "--local-addr", "127.0.0.1", "--timeout", "3", "--only", "mesh", env=env,
                  clear_env=True)
    assert out.returncode == 3, out.stderr
    assert "node-b.cluster" in out.stderr and "pbsdsh" in out.stderr and "PBS job script runs on the first node" in out.stderr


def test_one_slurm_task_per_node_says_nothing_of_the_processes_a_node_starts():
    """`srun --ntasks-per-node=1 ddpdoctor preflight` (README's line, and the `srun ... torchrun` pattern): one
    task is ddpdoctor's (or torchrun's), not the training's process count; several tasks per node are."""
    base = {"SLURM_JOB_ID": "7", "SLURM_NODEID": "0", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[1-2]"}
    assert le.from_env({**base, "SLURM_NTASKS_PER_NODE": "1"}).nproc_per_node is None
    assert le.from_env({**base, "SLURM_NTASKS_PER_NODE": "1", "SLURM_GPUS_ON_NODE": "4"}).nproc_per_node == 4
    assert le.from_env({**base, "SLURM_NTASKS_PER_NODE": "8", "SLURM_GPUS_ON_NODE": "8"}).nproc_per_node == 8
    assert le.from_env({**base, "SLURM_NTASKS_PER_NODE": "8"}).nproc_per_node == 8
    assert le.from_env(base).nproc_per_node is None
