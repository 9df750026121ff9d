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
