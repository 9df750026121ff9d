"""The launcher table (ddpdoctor/launchers/): detection as data, integers through numbers.parse_int (a value
like '²' is ignored, never a ValueError), each launcher's fix, and --local-nodes children's flags from the
typed request."""
from __future__ import annotations

import pytest

from ddpdoctor import launchers
from ddpdoctor.cli.preflight import preflight, request_argv
from ddpdoctor.preflight import PreflightRequest
from tests.unit.helpers import run_cli


@pytest.mark.parametrize("env,source", [
    ({"SLURM_NODEID": "²", "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "n[1-3]"}, "slurm"),
    ({"GROUP_RANK": "①", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "j"}, "torchrun"),
    ({"OMPI_COMM_WORLD_RANK": "١", "OMPI_COMM_WORLD_SIZE": "4"}, "mpi"),
    ({"KUBERNETES_SERVICE_HOST": "k", "PET_NNODES": "1:²", "PET_NODE_RANK": "٣"}, "kubernetes"),
])
def test_non_ascii_digits_are_not_ranks(env, source):
    """'²'.isdigit() is True and int('²') raises: through parse_int the value is as if unset."""
    info = launchers.from_env(env)
    assert info.source == source and info.node_rank is None


def test_signs_and_spaces_and_huge_values():
    assert launchers.from_env({"SLURM_NODEID": "-1", "SLURM_NNODES": "2"}).node_rank is None
    assert launchers.from_env({"SLURM_NODEID": " 1 ", "SLURM_NNODES": "2"}).node_rank == 1
    assert launchers.from_env({"SLURM_NODEID": "9" * 40, "SLURM_NNODES": "2"}).node_rank is None
    assert launchers.from_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "²"}).local_rank is None


def test_slurm_nodelist_with_non_ascii_digits_is_one_usage_line():
    from ddpdoctor.errors import UsageError

    with pytest.raises(UsageError, match="SLURM_JOB_NODELIST"):
        launchers.expand_slurm_nodelist("n[¹-³]")


@pytest.mark.parametrize("env", [{"SLURM_NODEID": "²", "SLURM_NNODES": "²"}, {"GROUP_RANK": "①"},
                                 {"OMPI_COMM_WORLD_RANK": "١", "OMPI_COMM_WORLD_SIZE": "١"}])
def test_preflight_under_a_garbled_launcher_never_exits_4(env):
    res = run_cli("preflight", "--only", "python", "--no-save", env=env)
    assert res.returncode != 4 and "Traceback" not in res.stderr, res.stderr


def test_every_launcher_has_its_fix_and_the_table_knows_it():
    names = [launcher.name for launcher in launchers.ALL]
    assert names == ["torchrun", "lightning", "kubernetes", "slurm", "pbs", "mpi", "hosts"]
    for launcher in launchers.ALL:
        fix = launchers.start_everywhere_fix(launcher.name, "CMD")
        assert fix and fix == launcher.fix("CMD")
    started = [n for n in names if launchers.start_everywhere_fix(n, "C", others_joined=True).startswith("the launcher")]
    assert started == ["slurm", "pbs", "mpi"]
    assert "srun --overlap" in launchers.start_everywhere_fix("slurm", "ddpdoctor attach")
    assert launchers.per_node("SLURM_PROCID") == "SLURM" and launchers.per_node("NCCL_DEBUG") is None


def test_rank_variables_name_every_launcher_that_starts_workers():
    """attach reads a worker's rank through these: each launcher that starts processes says how."""
    for name in ("torchrun", "kubernetes", "slurm", "mpi"):
        launcher = launchers.by_name(name)
        assert launcher.rank_vars and launcher.local_rank_vars and launcher.size_vars, name
    # Lightning's own launcher gives none: the node's rank, the local rank, and local rank 0 is their parent
    lightning = launchers.by_name("lightning")
    assert lightning.first_is_parent and lightning.node_rank_vars and lightning.local_rank_vars and not lightning.rank_vars


def test_lightnings_own_launcher_is_told_from_torchruns_and_a_schedulers():
    env = {"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "n1", "MASTER_PORT": "5"}
    info = launchers.from_env(env)
    assert (info.source, info.node_rank, info.local_rank, info.master) == ("lightning", 1, 1, "n1:5")
    assert launchers.from_env({**env, "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "0"}).source == "lightning"
    assert launchers.from_env({**env, "RANK": "3", "TORCHELASTIC_RUN_ID": "j"}).source == "torchrun"
    assert launchers.from_env({"NODE_RANK": "1", "MASTER_ADDR": "n1"}).source is None  # a user's own variables


def test_local_node_children_get_the_request_back():
    """--local-nodes children: every preflight option that is a request field travels, from the typed request."""
    request = PreflightRequest(only=("python", "torch"), skip=("gpu-perf",), sets=("clock-skew.warn_ms=50",),
                               perf=True, gpus_per_node=2, timeout=12.5, token="s3", nproc_per_node=4,
                               rdzv_id="job1", code_dir="/src", shared_dir="/shared", config_path="/c.toml")
    argv = request_argv(request)
    ctx = preflight.make_context("preflight", list(argv))
    back = PreflightRequest.from_params(ctx.params)
    assert back == request


def test_request_argv_covers_every_request_option():
    """A new preflight option that is a request field travels without an edit here, unless the cluster owns it."""
    from dataclasses import fields

    from ddpdoctor.cli.preflight import LOCAL_NODE_OWNS

    known = {f.name for f in fields(PreflightRequest)}
    options = {p.name for p in preflight.params if p.name in known}
    assert options - set(LOCAL_NODE_OWNS) >= {"only", "skip", "sets", "perf", "token", "baseline", "timeout"}
