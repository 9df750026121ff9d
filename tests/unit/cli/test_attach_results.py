"""attach on every node of a shared working directory (issue 55 U2): one result per job (the master's) and one
part per node, never a partial one in place of the whole; a worker says it sent its ranks to the master; a one-node
attach says the other nodes' ranks were not read."""
from __future__ import annotations

import io
import json

from rich.console import Console

from ddpdoctor.cli import attach_cmd, common
from ddpdoctor.cli.report_cmd import result_files
from ddpdoctor.forensics.attach.run import AttachRequest, cluster_doc
from ddpdoctor.report.console_attach import render

ENV = {"schema": "ddpdoctor", "kind": "attach", "verdict": "fail", "exit_code": 1, "run_id": "job-42"}
MASTER = dict(ENV, role="master", host="n1", ranks=[{"rank": r} for r in range(6)],
              job={"id": "42", "world_size": 6, "ranks_elsewhere": []}, diagnosis={"category": "missing_rank"})
WORKER = dict(ENV, role="worker", host="n2", ranks=[], ranks_sent=2, master="n1:29500",
              diagnosis={"category": "worker"})
ONE_NODE = dict(ENV, host="n3", ranks=[{"rank": 4}, {"rank": 5}],
                job={"id": "42", "world_size": 6, "ranks_here": [4, 5], "ranks_elsewhere": [0, 1, 2, 3]},
                diagnosis={"category": "missing_rank", "summary": "rank(s) 0-3 never entered the all_reduce",
                           "culprits": [{"rank": 0}, {"rank": 1}], "fix": "x"})
WHOLE_ONE_NODE = dict(ENV, host="n4", ranks=[{"rank": 0}, {"rank": 1}],
                      job={"id": "43", "world_size": 2, "ranks_elsewhere": []}, diagnosis={})


def test_the_whole_jobs_result_is_attach_json_a_part_is_the_nodes_own():
    assert attach_cmd.result_name(MASTER) == "attach.json"
    assert attach_cmd.result_name(WHOLE_ONE_NODE) == "attach.json"
    assert attach_cmd.result_name(WORKER) == "attach-n2.json"
    assert attach_cmd.result_name(ONE_NODE) == "attach-n3.json"
    assert attach_cmd.result_name(dict(WORKER, host="../x y")) != "attach.json"


def test_three_nodes_writing_one_folder_keep_the_masters_result(tmp_path, capsys):
    """The order the nodes end in: the master first, a worker and a one-node attach after it."""
    for doc in (MASTER, WORKER, ONE_NODE):
        common.emit(dict(doc), filename=attach_cmd.result_name(doc), out_dir=tmp_path, report_file=None,
                    as_json=True, render=render, save=None)
    capsys.readouterr()
    assert json.loads((tmp_path / "attach.json").read_text())["role"] == "master"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attach-n2.json", "attach-n3.json", "attach.json"]
    assert [p.name for p in result_files(tmp_path)] == ["attach.json"]  # the report: the whole stands for its parts
    (tmp_path / "attach.json").unlink()
    assert [p.name for p in result_files(tmp_path)] == ["attach-n2.json", "attach-n3.json"]


def _shown(doc: dict) -> str:
    out = io.StringIO()
    render(doc, Console(file=out, width=200))
    return out.getvalue()


def test_a_worker_says_it_sent_its_ranks_to_the_master():
    text = _shown(WORKER)
    assert "2 rank(s) read here and sent to the master at n1:29500" in text and "0 rank(s)" not in text
    doc = cluster_doc({"role": "worker", "this_node": "n2", "nodes": {}, "verdict": "fail", "exit_code": 1},
                      AttachRequest(master="n1:29500"), sent=2)
    assert doc["ranks_sent"] == 2 and doc["master"] == "n1:29500"


def test_a_one_node_attach_says_the_other_nodes_ranks_were_not_read():
    text = _shown(ONE_NODE)
    assert "rank(s) 0-3 not read: no process of theirs here" in text, text
    assert "rank 0 (not read: no process of it on this node)" in text
