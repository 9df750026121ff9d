"""Results kept without flags: preflight and nccl-bench save under ./ddpdoctor-results/<run id>/ and say where;
--output, --no-save and $DDPDOCTOR_NO_SAVE change that; a results directory that cannot be written never
changes the verdict; `ddpdoctor report` alone builds the latest run's report and names the files it read."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor import documents
from ddpdoctor.cli import run


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # setenv first, so that teardown restores each variable even after the command set it (--run-id exports
    # DDPDOCTOR_RUN_ID for its child processes, and these commands run in this process).
    for var in ("DDPDOCTOR_NO_SAVE", "DDPDOCTOR_RESULTS_DIR", *documents.RUN_ID_VARS):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    return tmp_path


def test_preflight_saves_under_the_run_id_and_says_where(cwd, capsys):
    assert run(["preflight", "--only", "env-vars", "--run-id", "wf-9"]) in (0, 1)
    (saved,) = (cwd / "ddpdoctor-results" / "wf-9").glob("node-*.json")
    assert documents.load(saved)["run_id"] == "wf-9"
    assert f"wrote result: ddpdoctor-results/wf-9/{saved.name}" in capsys.readouterr().err


def test_no_save_flag_and_env_keep_nothing(cwd, monkeypatch):
    assert run(["preflight", "--only", "env-vars", "--no-save"]) in (0, 1)
    monkeypatch.setenv("DDPDOCTOR_NO_SAVE", "1")
    assert run(["preflight", "--only", "env-vars"]) in (0, 1)
    assert not (cwd / "ddpdoctor-results").exists()


def test_output_replaces_the_default_directory(cwd):
    assert run(["preflight", "--only", "env-vars", "--output", "out", "--run-id", "wf-3"]) in (0, 1)
    assert list((cwd / "out").glob("node-*.json")) and not (cwd / "ddpdoctor-results").exists()


def test_results_dir_moves_the_tree(cwd):
    assert run(["preflight", "--only", "env-vars", "--results-dir", "elsewhere", "--run-id", "wf-4"]) in (0, 1)
    assert list((cwd / "elsewhere" / "wf-4").glob("node-*.json"))


def test_a_results_directory_that_cannot_be_written_never_changes_the_verdict(cwd, capsys):
    (cwd / "ddpdoctor-results").write_text("a file where the directory should be")  # root ignores chmod
    code = run(["preflight", "--only", "env-vars", "--json"])
    out = capsys.readouterr()
    doc = json.loads(out.out)  # the result came first, whole
    assert code == doc["exit_code"] and code in (0, 1)
    assert "result not saved" in out.err and "Traceback" not in out.err
    assert len([ln for ln in out.err.splitlines() if "not saved" in ln]) == 1


def test_report_alone_builds_the_latest_run_and_names_its_files(cwd, capsys):
    older, newer = cwd / "ddpdoctor-results" / "old-run", cwd / "ddpdoctor-results" / "new-run"
    for d, rid in ((older, "old-run"), (newer, "new-run")):
        d.mkdir(parents=True)
        node = documents.preflight_doc(scope="node", nodes={"n1": {"rank": 0, "host": "n1", "facts": {}}}, checks=[],
                                       results=[], run={}, run_id=rid)
        documents.dump(node, d / "node-n1.json")
    cluster = documents.preflight_doc(scope="cluster", nodes={"n1": {"rank": 0, "host": "n1", "facts": {}},
                                                              "n2": {"rank": 1, "host": "n2", "facts": {}}},
                                      checks=[], results=[], run={}, run_id="new-run")
    documents.dump(cluster, newer / "cluster.json")
    (newer / "logs").mkdir()
    (newer / "logs" / "error.json").write_text("{}")  # a record of run-trainer's, not a result
    os.utime(older / "node-n1.json", (1, 1))
    assert run(["report"]) == 0
    out = capsys.readouterr().out
    assert "new-run" in out and "cluster.json" in out and "node-n1.json" not in out  # cluster.json holds every node
    assert (newer / "report.html").stat().st_size > 1000
    assert "ddpdoctor-results/new-run/report.html" in out


def test_report_alone_reads_only_the_files_the_commands_saved(cwd, capsys):
    """The reference trainer's resumed.json (run-trainer --resume writes it beside run.json) and a user's own
    JSON in the run's directory are not results: `ddpdoctor report` after a resumed run was exit 2."""
    where = cwd / "ddpdoctor-results" / "resumed-run"
    where.mkdir(parents=True)
    documents.dump(documents.envelope("run-trainer", verdict="pass", run_id="resumed-run"), where / "run.json")
    (where / "resumed.json").write_text('{"snapshot": "/r/a/snapshots/latest.pt", "step": 6}')
    (where / "my-notes.json").write_text("not even JSON")
    assert run(["report"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "read run.json" in out and "resumed.json" not in out and "my-notes" not in out


def test_report_alone_without_results_is_one_line_exit_2(cwd, capsys):
    assert run(["report"]) == 2
    err = capsys.readouterr().err
    assert "no results in ddpdoctor-results" in err and len(err.strip().splitlines()) == 1


def test_report_results_dir_that_is_a_file_is_one_line_exit_2(cwd, capsys):
    (cwd / "notes.txt").write_text("x")
    assert run(["report", "--results-dir", "notes.txt"]) == 2
    err = capsys.readouterr().err
    assert "notes.txt is not a directory" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.timeout(200)
def test_local_nodes_keep_one_cluster_file(cwd):
    """--local-nodes: the master's cluster.json only (the simulated nodes save nothing of their own)."""
    env = {k: v for k, v in os.environ.items() if k != "DDPDOCTOR_NO_SAVE" and k not in documents.RUN_ID_VARS}
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "-q", "preflight", "--local-nodes", "2", "--timeout", "60",
                        "--only", "mesh,launch-args", "--run-id", "wf-5"], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=190)  # --timeout 60: two nodes importing torch on a loaded 2-core box
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(x.name for x in (cwd / "ddpdoctor-results" / "wf-5").iterdir()) == ["cluster.json"]


def test_the_default_directory_is_fixed_before_the_work_and_shared_by_the_document(cwd):
    """A cluster's master tells the other nodes where its cluster.json goes before it writes it: the run id is
    pinned first (the scheduler's job id here), and the document then carries that same id."""
    from ddpdoctor.cli import common

    os.environ["SLURM_JOB_ID"] = "4711"
    where = common.default_result_dir(common.saving(str(cwd / "ddpdoctor-results"), False, None))
    assert where == (cwd / "ddpdoctor-results" / "4711").resolve()
    assert os.environ["DDPDOCTOR_RUN_ID"] == "4711" and documents.envelope("preflight")["run_id"] == "4711"
    assert common.default_result_dir(common.saving(str(cwd), True, None)) is None  # --no-save: nothing kept


def test_a_worker_line_names_the_masters_default_directory(capsys):
    """A worker's one line points at the master's cluster.json under the default results directory."""
    from ddpdoctor.report.console import render_worker_line, stderr_console

    doc = {"this_node": "node2", "verdict": "pass", "exit_code": 0, "results": [],
           "master": {"node": "node1", "host": "node1", "output_dir": "/home/u/ddpdoctor-results/4711", "results": 0}}
    render_worker_line(doc, stderr_console())
    err = capsys.readouterr().err
    assert "node1 printed the full summary and wrote the cluster result to /home/u/ddpdoctor-results/4711/cluster.json" in err


def test_a_bad_run_id_names_where_it_came_from(cwd, monkeypatch, capsys):
    """A run id from the environment is named as the variable, not as a --run-id the user never typed."""
    monkeypatch.setenv("DDPDOCTOR_RUN_ID", "a\nb")
    assert run(["preflight", "--only", "env-vars"]) == 2
    err = capsys.readouterr().err
    assert "Error: $DDPDOCTOR_RUN_ID 'a\\nb': expected" in err and "Traceback" not in err
    monkeypatch.delenv("DDPDOCTOR_RUN_ID")
    assert run(["preflight", "--only", "env-vars", "--run-id", "../x"]) == 2
    assert "Error: --run-id '../x': expected" in capsys.readouterr().err
    assert not (cwd / "ddpdoctor-results").exists()


def test_torchruns_default_rendezvous_id_is_no_run_id(cwd, monkeypatch):
    """torchrun without --rdzv-id sets TORCHELASTIC_RUN_ID=none: every such job landed in ddpdoctor-results/none/,
    overwriting the last one's results. An id given to torchrun is the run's id."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    first, second = documents.new_run_id(), documents.new_run_id()
    assert "none" not in (first, second) and first != second and len(first) == 12
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-77")
    assert documents.new_run_id() == "job-77"
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert documents.new_run_id() == "4242"


def test_report_alone_shows_the_last_run_with_its_workflow_and_names_the_others(cwd, capsys):
    """Issue 55 U4 (this replaces issue 41's "the last run whole", which showed a newcomer's plain preflight,
    nccl-bench and run-trainer, each under its own run id, as the last run alone): the last run, then the newest
    run of each earlier workflow step. Issue 41's complaints stay answered: run-trainer's own preflight beside
    run.json does not stand for the user's preflight (pre-1 is read too), an earlier run of a step taken (pre-0,
    an older run-trainer run) is not added unasked, and `--run` picks any."""
    from ddpdoctor.cli.report_cmd import kind_of, result_files

    root = cwd / "ddpdoctor-results"
    for i, rid in enumerate(("pre-1", "bench-2", "run-3", "pre-0", "run-0")):
        (root / rid).mkdir(parents=True)
    node = documents.preflight_doc(scope="node", nodes={"n1": {"rank": 0, "host": "n1", "facts": {}}}, checks=[],
                                   results=[], run={}, run_id="pre-1")
    documents.dump(node, root / "pre-1" / "node-n1.json")
    documents.dump(dict(node, run_id="pre-0"), root / "pre-0" / "node-n1.json")
    now = time.time()
    os.utime(root / "pre-0" / "node-n1.json", (now - 400, now - 400))  # the oldest
    documents.dump(documents.envelope("run-trainer", verdict="pass", run_id="run-0"), root / "run-0" / "run.json")
    os.utime(root / "run-0" / "run.json", (now - 300, now - 300))  # a run-trainer run before this workflow's
    documents.dump(documents.envelope("nccl-bench", run_id="bench-2", run={}, rows=[], summary={}, verdict="pass"),
                   root / "bench-2" / "nccl-bench.json")
    os.utime(root / "bench-2" / "nccl-bench.json", (now - 100, now - 100))
    documents.dump(documents.envelope("run-trainer", verdict="pass", run_id="run-3"), root / "run-3" / "run.json")
    documents.dump(dict(node, run_id="run-3"), root / "run-3" / "node-n1.json")  # run-trainer's own preflight
    os.utime(root / "pre-1" / "node-n1.json", (now - 200, now - 200))
    assert run(["report"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    first, others = out.splitlines()[:2]
    assert first == ("the last run and the workflow before it in ddpdoctor-results: run-3: preflight, run-trainer "
                     "(read node-n1.json, run.json); bench-2: nccl-bench (read nccl-bench.json); pre-1: preflight "
                     "(read node-n1.json)"), first
    assert others.startswith("not in this report, 2 other runs in ddpdoctor-results, newest first: run-0 "
                             "(run-trainer, "), others
    assert "; pre-0 (preflight, " in others
    assert others.endswith("To add one: ddpdoctor report --run run-3 --run bench-2 --run pre-1 --run run-0"), others
    assert "4 files)" in out
    assert (root / "run-3" / "report.html").exists()
    # the line it gives works: both runs in one report, in the newest one's directory
    assert run(["report", "--run", "run-3", "--run", "bench-2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the runs asked for in ddpdoctor-results: run-3: preflight, run-trainer (read "
                          "node-n1.json, run.json); bench-2: nccl-bench (read nccl-bench.json)"), out
    assert "3 files)" in out
    assert run(["report", "--run", "nope"]) == 2
    assert "--run nope: no saved results under ddpdoctor-results/nope; the runs there, newest first: run-3, " \
           "bench-2, pre-1, run-0, pre-0" in capsys.readouterr().err
    # a kind added later (attach) is found by its envelope, not by a list of file names
    doc = dict(documents.envelope("run-trainer", run_id="att-4"), kind="attach")
    (root / "att-4").mkdir()
    documents.dump(doc, root / "att-4" / "attach.json")
    assert kind_of(root / "att-4" / "attach.json") == "attach"
    assert [p.name for p in result_files(root / "att-4")] == ["attach.json"]


def test_the_workflow_before_the_last_run_ends_a_day_before_it_and_at_a_later_step():
    from ddpdoctor.cli.report_cmd import WORKFLOW_GAP_S, SavedRun, workflow_runs

    def saved(name, kinds, at):
        return SavedRun(Path(name), [], kinds, at)

    now = 10 * WORKFLOW_GAP_S
    bench, pre = saved("bench", ["nccl-bench"], now - 60), saved("pre", ["preflight"], now - 120)
    assert workflow_runs([saved("run", ["run"], now), bench, pre]) == [workflow_runs([saved("run", ["run"], now)])[0],
                                                                        bench, pre]
    stale = saved("pre", ["preflight"], now - 60 - WORKFLOW_GAP_S - 1)
    assert [r.path.name for r in workflow_runs([saved("run", ["run"], now), bench, stale])] == ["run", "bench"]
    # the last run a preflight: nothing comes before that step
    assert [r.path.name for r in workflow_runs([saved("p2", ["preflight"], now), bench, pre])] == ["p2"]
