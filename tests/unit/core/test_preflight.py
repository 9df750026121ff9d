"""preflight: the typed request (from the CLI's parameters or --preflight-args), the plan, and the one entry."""
from __future__ import annotations

import pytest

from ddpdoctor import preflight
from ddpdoctor.errors import UsageError
from ddpdoctor.preflight import PreflightRequest


def test_request_takes_the_commands_parameters_and_ignores_output_flags():
    req = PreflightRequest.from_params({"only": ("resources",), "timeout": 30.0, "as_json": True, "report_path": None})
    assert req.only == ("resources",) and req.timeout == 30.0 and not hasattr(req, "as_json")


def test_perf_adds_the_gpu_perf_switch_and_run_settings_reach_the_plan():
    plan = PreflightRequest(only=("resources", "gpu-perf"), perf=True, gpus_per_node=2, timeout=9).plan()
    assert [lc.name for lc in plan.checks] == ["gpu-perf", "resources"] or {lc.name for lc in plan.checks} >= {
        "resources", "gpu-perf"}
    assert plan.opts_by_check["gpu-perf"]["enabled"] is True
    assert plan.run["gpus_per_node"] == 2 and plan.run["timeout"] == 9


@pytest.mark.parametrize("req, env, cluster", [
    (PreflightRequest(), {}, False),
    (PreflightRequest(master="h:1"), {}, True),
    (PreflightRequest(nnodes=1), {"SLURM_NODEID": "0", "SLURM_NNODES": "4"}, False),  # a flag beats the launcher
    (PreflightRequest(), {"SLURM_NODEID": "0", "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "a[1-4]"}, True),
    (PreflightRequest(hosts=["a", "b"]), {}, True),
    (PreflightRequest(local_nodes=2), {}, True),
])
def test_cluster_or_single_node(req, env, cluster):
    assert req.is_cluster(env) is cluster


@pytest.mark.parametrize("field, flag", [("token", "--token"), ("node_rank", "--node-rank"), ("code_dir", "--code")])
def test_cluster_flags_without_a_cluster_are_usage_errors(monkeypatch, field, flag):
    monkeypatch.setattr(PreflightRequest, "is_cluster", lambda self, env=None: False)
    with pytest.raises(UsageError, match=flag):
        preflight.run(PreflightRequest(only=("resources",), **{field: "x" if field != "node_rank" else 1}))


def test_one_entry_returns_the_document_with_groups():
    doc = preflight.run(PreflightRequest(only=("resources",), nnodes=1))
    assert doc["kind"] == "preflight" and doc["scope"] == "node"
    assert [g["check"] for g in doc["groups"]] == ["resources"]


TORCHRUN_ONE_NODE = {"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2",
                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}


@pytest.mark.parametrize("env, speaks", [
    (dict(TORCHRUN_ONE_NODE, LOCAL_RANK="0", RANK="0"), True),
    (dict(TORCHRUN_ONE_NODE, LOCAL_RANK="1", RANK="1"), False),  # `torchrun --nproc-per-node 2 ... preflight`
    ({"SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "a1", "SLURM_LOCALID": "1"}, False),  # srun -n 2
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, False),  # mpiexec -n 4 on one host
    ({"SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "a1"}, True),  # a shell in an allocation
])
def test_one_report_per_node_when_a_launcher_starts_several_processes_on_one_node(monkeypatch, env, speaks):
    """Local rank 0 speaks for the node, as in a cluster run: the others printed the same report again,
    interleaved with the first, and wrote the same result file."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    doc = preflight.run(PreflightRequest(only=("resources",)))
    assert (doc is not None) is speaks
    assert doc is None or doc["scope"] == "node"


def test_perf_turns_on_every_check_that_declares_opt_in_perf_by_its_declaration():
    """--perf is not tied to a check's name: any installed check with opt_in = "perf" and an "enabled"
    option is turned on (a plugin's too); a check without the option, or of another group, is left alone."""
    from ddpdoctor.api import Check, Option
    from ddpdoctor.registry import LoadedCheck, opt_in_sets

    def loaded(name, opt_in, options):
        cls = type(name, (Check,), {"name": name, "opt_in": opt_in, "options": options})
        return LoadedCheck(cls(), "plugin 1.0", f"p:{name}")

    checks = [loaded("disk-bw", "perf", {"enabled": Option(False, "measure")}),
              loaded("no-switch", "perf", {}), loaded("soak", "soak", {"enabled": Option(False, "x")}),
              loaded("plain", "", {"enabled": Option(False, "x")})]
    assert opt_in_sets(checks, ["perf"]) == ("disk-bw.enabled=true",)
    assert opt_in_sets(checks, []) == ()
    plan = PreflightRequest(only=("gpu-perf",), perf=False).plan()
    assert plan.opts_by_check["gpu-perf"]["enabled"] is False
