"""Unit tests of ddpdoctor/baseline.py and of --baseline as a flag (issue 20 item 4): a known-good run's values
read under the input policy, the keys of one run left out, and every bad file one line and exit 2."""
from __future__ import annotations

import json

import pytest

from ddpdoctor import baseline, documents
from ddpdoctor.api import baseline_name, baseline_values
from ddpdoctor.cli import run
from ddpdoctor.errors import UsageError

from ..cli.test_errors_and_output import one_error_line


def node(torch="2.13.0", numpy="2.4.6", job="1234", ib="mlx5"):
    """One node's entry in a master's cluster.json: the comparables the runner lifted from its gathers."""
    return {"rank": 0, "host": "n", "addr": "10.0.0.1", "facts": {}, "gather": {},
            "comparable": {"torch-build": {"torch_version": torch, "python_version": "3.11.7"},
                           "packages": {"numpy": numpy, "torch": torch},
                           "env-vars": {"NCCL_IB_HCA": ib, "SLURM_JOB_ID": job, "MASTER_ADDR": "n1"},
                           "parity": {"ddpdoctor": "0.1.0", "checks": ["mesh", "parity"]}}}


def write(tmp_path, nodes, name="cluster.json", **over):
    doc = documents.preflight_doc(scope="cluster", nodes=nodes, checks=[], results=[], run={}) | over
    path = tmp_path / name
    documents.dump(doc, path)
    return str(path)


def test_a_cluster_json_gives_every_accepted_value_without_the_keys_of_one_run(tmp_path):
    path = write(tmp_path, {"n1": node(), "n2": node(), "n3": node(ib="mlx4")})
    ref = baseline.load(path)
    assert ref["file"] == path and ref["nodes"] == ["n1", "n2", "n3"] and ref["verdict"] == "pass"
    comp = ref["comparable"]
    assert comp["torch-build"]["torch_version"] == ["2.13.0"]
    assert comp["packages"] == {"numpy": ["2.4.6"], "torch": ["2.13.0"]}
    assert comp["env-vars"]["NCCL_IB_HCA"] == ["mlx5", "mlx4"]  # the known-good nodes differed: both accepted
    # a job id, the master's address, the tool's version and the checks selected belong to one run
    assert "SLURM_JOB_ID" not in comp["env-vars"] and "MASTER_ADDR" not in comp["env-vars"]
    assert "parity" not in comp or not comp["parity"]
    opts = {"baseline": ref}
    assert baseline_values(opts, "torch-build", "torch_version") == ["2.13.0"]
    assert baseline_values(opts, "packages", "scipy", "(missing)") == ["(missing)"]  # the good run lacked it
    assert baseline_values(opts, "torch-build", "nosuch") is None  # no reference: the majority decides
    assert baseline_values(opts, "plugin", "x") is None and baseline_values({}, "packages", "numpy") is None
    assert baseline_name(opts) == f"the baseline {path}" and baseline_name({}) is None


def test_a_one_node_result_is_a_baseline_too(tmp_path):
    path = write(tmp_path, {"solo": node(torch="2.12.0")}, name="node-solo.json", scope="node")
    assert baseline.load(path)["comparable"]["torch-build"]["torch_version"] == ["2.12.0"]


def test_a_document_written_before_comparables_is_read_from_its_facts(tmp_path):
    old = {"rank": 0, "host": "n", "addr": None, "gather": {"packages": {"status": "ok"}},
           "facts": {"packages": {"packages": ["numpy==2.4.6", "torch==2.13.0"]}}}
    ref = baseline.load(write(tmp_path, {"n1": old}))
    assert ref["comparable"]["packages"] == {"numpy": ["2.4.6"], "torch": ["2.13.0"]}


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ("[" * 100 + "]" * 100, "nested deeper"),
    (json.dumps({"schema": "other"}), "not a ddpdoctor result file"),
    ("\x00\x01", "binary data"),
])
def test_bad_files_are_one_usage_error_naming_the_file(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        baseline.load(str(path))
    assert str(path) in str(err.value) and needle in str(err.value)


def test_bad_shapes_and_the_wrong_kind_of_result_are_usage_errors(tmp_path):
    bad = write(tmp_path, {"n1": node() | {"comparable": {"packages": ["numpy"]}}}, name="shape.json")
    with pytest.raises(UsageError, match="bad document shape: nodes.n1.comparable.packages"):
        baseline.load(bad)
    worker = write(tmp_path, {"n1": {"rank": 0, "host": "n", "addr": None, "exports": {}}}, name="node-w.json")
    with pytest.raises(UsageError, match="no node in it carries the facts"):
        baseline.load(worker)
    bench = tmp_path / "bench.json"
    documents.dump(documents.envelope("nccl-bench", verdict="pass", rows=[]), bench)
    with pytest.raises(UsageError, match="not a preflight one"):
        baseline.load(str(bench))
    with pytest.raises(UsageError, match="cannot read"):
        baseline.load(str(tmp_path / "absent.json"))


def test_flag_and_env_var_bad_file_exit_2_in_one_line(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert run(["preflight", "--master", "127.0.0.1:1", "--nnodes", "2", "--baseline", str(bad)]) == 2
    assert str(bad) in one_error_line(capsys.readouterr().err)
    monkeypatch.setenv("DDPDOCTOR_PREFLIGHT_BASELINE", str(bad))  # mirrored like every option
    assert run(["preflight", "--master", "127.0.0.1:1", "--nnodes", "2"]) == 2
    assert str(bad) in one_error_line(capsys.readouterr().err)


def test_a_baseline_needs_a_cluster_run(tmp_path, capsys):
    good = write(tmp_path, {"n1": node()})
    assert run(["preflight", "--only", "env-vars", "--baseline", good]) == 2
    assert "--baseline needs a cluster run" in one_error_line(capsys.readouterr().err)


def test_run_trainer_passes_it_through_the_preflight_parser(tmp_path):
    from ddpdoctor.cli.preflight import request_from_args

    good = write(tmp_path, {"n1": node()})
    request = request_from_args(["--baseline", good])
    assert request.baseline["comparable"]["packages"]["numpy"] == ["2.4.6"]
    assert request.plan().run["baseline"] is request.baseline  # reaches every compare's opts as a run setting
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(UsageError, match="bad.json"):
        request_from_args(["--baseline", str(bad)])
