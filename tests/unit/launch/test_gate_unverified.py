"""run-trainer's gate: a PASS this node could not verify (no key, no token) does not let the job launch."""
import pytest

from ddpdoctor import preflight
from ddpdoctor.launch import gate
from ddpdoctor.launch.config import TrainerConfig


@pytest.mark.parametrize("auth, expected", [
    (None, "pass"),
    ({"authenticated": True, "verdict_verified": True}, "pass"),
    ({"authenticated": False, "verdict_verified": False}, "fail"),  # a forged PASS would look just like this
])
def test_an_unverified_pass_gates_as_a_fail(monkeypatch, auth, expected):
    doc = {"verdict": "pass", "results": []}
    if auth is not None:
        doc["auth"] = auth
    monkeypatch.setattr(preflight, "run", lambda request, quiet=False: doc)
    cfg = TrainerConfig(nnodes=2, nproc_per_node=1, master="a:29500", run_id="r1")
    pre = gate.run_preflight(cfg, preflight.PreflightRequest())
    assert pre["verdict"] == expected
    assert pre["verified"] is (expected == "pass")
