"""Unit tests of ddpdoctor/forensics/evidence/nccl_ras.py on RAS JSON written as NCCL's ras.rst describes
``ncclras -f json`` (no ncclras runs here: no GPU; the shape is the documented one, not one recorded live)."""
from __future__ import annotations

import json

from ddpdoctor.forensics.evidence import nccl_ras as ras

ONE_DEAD = {"communicators": [{"comm_hash": "0x5a1e", "ranks": [{"rank": r} for r in range(4)], "missing_ranks": [
    {"rank": 3, "host": "node7", "pid": 4242, "cuda_dev": 3, "nvml_dev": 3, "unresponsive": True,
     "considered_dead": True}]}]}
HEALTHY = {"communicators": [{"comm_hash": "0x5a1e", "ranks": [{"rank": r} for r in range(4)], "missing_ranks": []}]}


def test_a_missing_dead_rank_with_its_host_pid_and_gpu():
    report = ras.parse(json.dumps(ONE_DEAD))
    [r] = report.missing
    assert (r.rank, r.host, r.pid, r.gpu, r.unresponsive, r.dead) == (3, "node7", 4242, "3", True, True)
    assert not report.healthy and report.comms[0].ranks == 4


def test_fused_with_the_records_culprit():
    fused = ras.fuse(ras.parse(json.dumps(ONE_DEAD)), [3])
    assert fused.agrees and fused.ras_only == () and not fused.healthy_while_disagree
    assert ras.fuse(ras.parse(json.dumps(ONE_DEAD)), [1]).ras_only == (3,)


def test_ras_healthy_while_the_ranks_disagree_is_said():
    fused = ras.fuse(ras.parse(json.dumps(HEALTHY)), [2])
    assert fused.healthy_while_disagree and not fused.agrees and fused.missing == ()


def test_versions_and_bad_input():
    assert ras.supported("2.28.7") and ras.supported("2.30.7") and not ras.supported("2.27.5")
    assert not ras.supported(None) and ras.parse("not json") is None and ras.parse("{}") is None
