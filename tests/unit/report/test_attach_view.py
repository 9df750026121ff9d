"""`ddpdoctor report` shows an attach document: the verdict as a finding (rank, host, file:line, fix) and the
per-rank table; text read from the job's processes is escaped."""
from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor import documents
from ddpdoctor.forensics.attach import discover as disc
from ddpdoctor.forensics.attach.decide import decide
from ddpdoctor.forensics.attach.sample import read_rank
from ddpdoctor.forensics.evidence import pyspy
from ddpdoctor.report.viewmodel import build
from tests.unit.helpers import run_cli

DATA = Path(__file__).parents[1] / "forensics" / "data" / "pyspy"


def attach_doc() -> dict:
    reads = []
    for rank, name in enumerate(("allreduce_waiter", "own_code", "allreduce_waiter")):
        d = pyspy.parse((DATA / f"{name}.txt").read_text())
        reads.append(read_rank(disc.RankProcess(10 + rank, rank, rank, 3, 0, "python job.py", "u"), [d, d], "gpu<b>7"))
    job = disc.Job("run1@h:1", "torchrun", 3, "h:1", [disc.RankProcess(10 + i, i, i, 3, 0, "p", "u") for i in range(3)])
    return documents.envelope("attach", verdict="fail", exit_code=1, host="gpu<b>7", job=job.to_json(),
                              interval_s=3.0, ranks=[r.to_json() for r in reads], diagnosis=decide(reads, 3),
                              stopped=None)


def test_the_view_model_has_the_attach_finding_and_ranks():
    m = build([attach_doc()])
    assert m["verdict"] == "fail" and m["findings"][0]["check"] == "attach"
    assert "/tmp/u31rec/job.py:8" in m["findings"][0]["summary"]
    view = m["attach"][0]
    assert [r["in"] for r in view["ranks"]] == ["all_reduce", "its own code", "all_reduce"]
    assert view["culprits"][0]["rank"] == 1


def test_report_renders_an_attach_file_escaped(tmp_path):
    path = tmp_path / "attach.json"
    path.write_text(json.dumps(attach_doc()))
    out = tmp_path / "r.html"
    res = run_cli("report", str(path), "-o", str(out))
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert "attach" in html and "/tmp/u31rec/job.py:8" in html and "gpu&lt;b&gt;7" in html and "gpu<b>7" not in html


def test_no_internal_label_in_the_attach_header_or_finding():
    """Issue 41 item 3: the report showed `missing_rank:` in the finding and the attach header."""
    from ddpdoctor.report import wording

    m = build([attach_doc()])
    label = attach_doc()["diagnosis"]["category"]
    assert "_" in label  # the judge's label, e.g. outside_collectives / missing_rank
    assert m["attach"][0]["category"] == wording.kind(label)
    assert not m["findings"][0]["summary"].startswith(label) and label not in m["findings"][0]["summary"]


def test_a_job_where_no_rank_moved_is_a_warning_finding_blaming_no_rank():
    """attach's warn (no rank moved within --wait while a rank computes: a long step or a hang) is shown as a
    warning with its fix, no culprit."""
    reads = []
    for rank, name, cpu in ((0, "allreduce_waiter", 0.0), (1, "own_code", 0.9)):
        d = pyspy.parse((DATA / f"{name}.txt").read_text())
        r = read_rank(disc.RankProcess(10 + rank, rank, rank, 2, 0, "python job.py", "u"), [d, d], "h")
        r.moved, r.cpu = False, cpu
        reads.append(r)
    diag = decide(reads, 2, watched_s=30)
    doc = documents.envelope("attach", verdict="warn", exit_code=0, host="h", job=None, interval_s=3.0,
                             ranks=[r.to_json() for r in reads], diagnosis=diag, stopped=None)
    finding = build([doc])["findings"][0]
    assert finding["level"] == "warn" and "no rank moved in 30 s" in finding["summary"] and "--wait" in finding["fix"]
