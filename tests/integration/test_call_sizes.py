"""Who sent a message of the wrong size, named again (issue 45, item 7) without replacing a function in the job:
under Python 3.12+ run-trainer's bootstrap watches send/recv and all-to-all sizes with sys.monitoring
(launch/size_watch.py). A wrong-shaped send in a pipeline and a MoE dispatch whose splits send rank 0 one token
too many: run-trainer and `postmortem` of its run dir name the sender at its line, the rank gloo aborted a
consequence; healthy pipelining schedules (torch.distributed.pipelining and Megatron-style batch_isend_irecv)
pass with the same losses as under plain torchrun.

Needs a Python 3.12+ with torch: this interpreter when it is one, else $DDPDOCTOR_TEST_PYTHON312 (the checkout
is put first on its PYTHONPATH, so it runs this checkout's ddpdoctor); skipped, saying so, without one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.library_jobs import HERE as LIBRARY_JOBS
from tests.integration.shape_jobs import (
    SHAPES,
    Shape,
    culprits_named,
    postmortem,
    run_trainer,
)

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _python312() -> str | None:
    if sys.version_info >= (3, 12):
        return sys.executable
    candidate = os.environ.get("DDPDOCTOR_TEST_PYTHON312")
    if not candidate:
        return None
    probe = subprocess.run([candidate, "-c", "import sys, torch; assert sys.version_info >= (3, 12)"],
                           capture_output=True, timeout=120)
    return candidate if probe.returncode == 0 else None


PY312 = _python312()
needs_312 = pytest.mark.skipif(PY312 is None, reason="no Python 3.12+ with torch (sys.monitoring): set "
                               "DDPDOCTOR_TEST_PYTHON312 to one")
ENV = {"PYTHONPATH": str(ROOT)}


def _said(doc: dict | None) -> str:
    rc = (doc or {}).get("root_cause") or {}
    return f"root cause rank {rc.get('rank')}: {rc.get('message')} | culprits {culprits_named(doc)}"


@needs_312
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["pipeline-shape", "moe-splits"])
def test_the_sender_of_the_wrong_size_is_named_by_run_trainer_and_postmortem(name, tmp_path):
    shape: Shape = SHAPES[name]
    run = run_trainer(shape, tmp_path, python=PY312, env=ENV)
    doc = run.doc
    assert run.code == 1 and doc and doc["verdict"] == "fail", run.stderr[-3000:]
    assert culprits_named(doc) == list(shape.culprits), _said(doc)
    rc = doc["root_cause"]
    assert rc["rank"] == shape.culprits[0] and rc["location"] == shape.location, _said(doc)
    assert rc["error_type"] == "size_mismatch" and "expected" in rc["message"], _said(doc)
    detector = [c for c in doc["consequences"] if "it detected the mismatch" in (c.get("reason") or "")]
    assert len(detector) == 1 and detector[0]["rank"] not in shape.culprits, doc["consequences"]
    # the same run dir read afterwards: postmortem reads the kept sizes beside the logs
    [node_logs] = (tmp_path / "run").glob("*/logs/*")
    code, later, err = postmortem(node_logs)
    assert code == 1 and culprits_named(later) == list(shape.culprits), f"{err[-2000:]} {_said(later)}"
    assert later["root_cause"]["location"] == shape.location, _said(later)


def _losses(folder: Path) -> dict[str, list[float]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))}


@needs_312
@pytest.mark.timeout(300)
def test_healthy_pipelining_schedules_pass_with_unchanged_losses(tmp_path):
    """Every pipelining schedule's sends and receives go past the watch; the losses are bit-identical to plain
    torchrun's (nothing in the job changed) and the watch kept their calls."""
    shape = Shape("pipelining-all-healthy", "pipelining_job.py", "healthy", 2, (), None, what="no fault",
                  folder=LIBRARY_JOBS, args=("--schedule", "gpipe,1f1b,interleaved,batch"))
    watched = run_trainer(shape, tmp_path / "watched", python=PY312, env={**ENV, "LOSS_DIR": str(tmp_path / "w")})
    assert watched.code == 0 and watched.doc["verdict"] == "pass", watched.stderr[-3000:]
    plain = subprocess.run([PY312, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(shape.path), "healthy",
                            *shape.args], capture_output=True, text=True, timeout=200, cwd=tmp_path,
                           env={**os.environ, **ENV, "LOSS_DIR": str(tmp_path / "p")})
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert _losses(tmp_path / "w") == _losses(tmp_path / "p") and len(_losses(tmp_path / "w")) == 2
    from ddpdoctor.forensics.evidence.call_sizes import FOLDER, read_dir

    [folder] = (tmp_path / "watched" / "run").glob(f"*/{FOLDER}")
    kept = read_dir(folder)
    assert sorted(kept) == [0, 1] and all({c.op for c in calls} >= {"send", "recv"} for calls in kept.values())


@needs_312
@pytest.mark.timeout(240)
def test_one_token_fewer_passes_with_a_warning_naming_the_sender(tmp_path):
    """gloo accepts a shorter message: the MoE job whose rank 1 sends rank 0 one token fewer ends with exit 0.
    The end is normal (a pass), and the warning says rank 1's split, at its line, left values it never wrote."""
    fault = SHAPES["moe-splits"]
    shape = Shape("moe-fewer", fault.script, "fewer", fault.nproc, (), None, what="one token fewer")
    run = run_trainer(shape, tmp_path, python=PY312, env=ENV)
    doc = run.doc
    assert run.code == 0 and doc and doc["verdict"] == "pass", run.stderr[-3000:]
    [w] = doc["warnings"]
    assert w["rank"] == 1 and w["location"] == f"{shape.path}:{SHAPES['moe-splits'].line}", w
    assert "rank 1 sent rank 0 4 B" in w["message"] and "expected 8 B" in w["message"], w
    report = tmp_path / "report.html"
    [run_json] = (tmp_path / "run").glob("*/run.json")
    p = subprocess.run([PY312, "-m", "ddpdoctor", "report", str(run_json), "-o", str(report)], capture_output=True,
                       text=True, timeout=120, env={**os.environ, **ENV}, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "rank 1 sent rank 0 4 B" in report.read_text()
