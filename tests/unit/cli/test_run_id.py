"""One run id across a workflow: --run-id / $DDPDOCTOR_RUN_ID / the scheduler's job id reach every document."""
from __future__ import annotations

import json

import pytest

from ddpdoctor import documents
from tests.unit.helpers import run_cli, run_process


def _env(extra=None):
    """None of the run-id variables this environment may carry (a CI job's own id), then ``extra``."""
    return {**{k: None for k in documents.RUN_ID_VARS}, **(extra or {})}


def ddpdoctor(*args, env=None):
    """In-process."""
    return run_cli(*args, env=_env(env))


def ddpdoctor_process(*args, env=None, timeout=120):
    """A real process: for the commands that start ranks or nodes (kept out of pytest's own process)."""
    return run_process(*args, env=_env(env), timeout=timeout)


@pytest.mark.parametrize("var", ["DDPDOCTOR_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID"])
def test_envelope_takes_the_workflow_or_scheduler_id(monkeypatch, var):
    for v in documents.RUN_ID_VARS:
        monkeypatch.delenv(v, raising=False)
    assert len(documents.envelope("preflight")["run_id"]) == 12  # nothing set: a new id
    monkeypatch.setenv(var, "job-42")
    assert documents.envelope("preflight")["run_id"] == "job-42"


@pytest.mark.slow  # nccl-bench starts two ranks
def test_preflight_and_bench_share_the_run_id_given_on_the_command_line():
    pre = ddpdoctor("preflight", "--only", "resources", "--run-id", "wf-1", "--json")
    assert pre.returncode in (0, 1), pre.stderr
    assert json.loads(pre.stdout)["run_id"] == "wf-1"
    bench = ddpdoctor_process("nccl-bench", "--backend", "gloo", "--nproc-per-node", "2", "-b", "1K", "-e", "1K",
                              "-n", "2", "-w", "1", "--json", env={"DDPDOCTOR_RUN_ID": "wf-1"})
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["run_id"] == "wf-1"


def test_a_bad_run_id_is_a_usage_error():
    out = ddpdoctor("preflight", "--run-id", "a/../b c")
    assert out.returncode == 2 and "--run-id" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow  # a cluster of two node processes
@pytest.mark.timeout(120)
def test_every_node_of_a_cluster_carries_the_masters_run_id(tmp_path):
    out = ddpdoctor_process("-q", "preflight", "--local-nodes", "2", "--timeout", "20", "--only",
                            "mesh,launch-args", "--run-id", "wf-2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["run_id"] == "wf-2"
