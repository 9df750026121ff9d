"""DeepSpeed under run-trainer (issue 45 items 2 and 6), where DeepSpeed is installed (it is not in the test extra:
a cold run builds its C++ ops, about a minute of the compiler on 2 cores; `pip install deepspeed` to run these):
- a cold TORCH_EXTENSIONS_DIR: rank 0 builds DeepSpeed's ops at start-up while rank 1 waits on torch's build lock,
  far past `--hang-timeout 8`: the ranks move (a compiler child's CPU), so the job passes, and no build lock is
  left behind (the watchdog used to kill it there, leaving the lock every later job on the node waited on);
- rank 1 hung in its own code after start-up: named at its line, the others waiting in DeepSpeed's own group.
"""
from __future__ import annotations

import pytest

from tests.integration.library_jobs import HERE
from tests.integration.shape_jobs import Shape, culprits_named, run_trainer

pytestmark = pytest.mark.slow
deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install deepspeed)")


def _shape(mode: str) -> Shape:
    return Shape(f"deepspeed-{mode}", "deepspeed_job.py", mode, 2, (1,) if mode == "hang" else (),
                 "# FAULT hang:" if mode == "hang" else None, hangs=True, folder=HERE, marker_file="faults.py")


@pytest.fixture(scope="module")
def extensions(tmp_path_factory):
    return tmp_path_factory.mktemp("torch_extensions")  # cold for the first test, warm for the second


@pytest.mark.timeout(420)
def test_a_cold_op_build_at_start_up_is_no_hang_and_leaves_no_lock(tmp_path, extensions):
    run = run_trainer(_shape("healthy"), tmp_path, limit=400, env={"TORCH_EXTENSIONS_DIR": str(extensions)})
    assert run.code == 0 and run.doc and run.doc["verdict"] == "pass", run.stderr[-3000:]
    assert "[hang]" not in run.stderr, run.stderr[-3000:]
    built = [p.name for p in extensions.iterdir()]
    assert built, "no op was built: the start-up this test is about did not happen"
    assert not list(extensions.rglob("lock")), list(extensions.rglob("lock"))


@pytest.mark.timeout(300)
def test_a_hang_after_start_up_is_named_at_its_line(tmp_path, extensions):
    shape = _shape("hang")
    run = run_trainer(shape, tmp_path, limit=280, env={"TORCH_EXTENSIONS_DIR": str(extensions)})
    assert run.code == 1 and run.doc and run.doc["verdict"] == "fail", run.stderr[-3000:]
    assert culprits_named(run.doc) == [1], run.doc.get("root_cause")
    assert run.doc["root_cause"]["location"] == shape.location, run.doc["root_cause"]
