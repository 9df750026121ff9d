"""Unit tests of ddpdoctor/forensics/evidence/nccl_ras.py on RAS JSON in the shape NCCL 2.28-2.30 write for
``ncclras -f json`` (Ray Train's tests record it: ``hash``, ``size``, a missing rank's ``status`` with
``unresponsive``/``considered_dead``, NCCL 2.28.9's missing comma before it). No ncclras runs here (no GPU)."""
from __future__ import annotations

import json

from ddpdoctor.forensics.evidence import nccl_ras as ras

ONE_DEAD = {"nccl_version": "2.28.9", "communicators": [{
    "hash": "0x5a1e", "size": 4, "ranks": [{"rank": r, "collective_counts": {"AllReduce": 12}} for r in range(3)],
    "missing_ranks": [{"rank": 3, "host": "node7", "pid": 4242, "cuda_dev": 3, "nvml_dev": 3,
                       "status": {"unresponsive": True, "considered_dead": True}}]}]}
HEALTHY = {"nccl_version": "2.28.9", "communicators": [{
    "hash": "0x5a1e", "size": 4, "ranks": [{"rank": r} for r in range(4)], "missing_ranks": []}]}
# NCCL 2.28.9 as it writes a missing rank: no comma before "status"
AS_2_28_9_WRITES = '''{"nccl_version": "2.28.9", "communicators": [{"hash": "0x5a1e", "size": 4,
 "ranks": [{"rank": 0}, {"rank": 1}, {"rank": 2}],
 "missing_ranks": [{"rank": 3, "host": "node7", "pid": 4242, "cuda_dev": 3
   "status": {"unresponsive": true, "considered_dead": true}}]}]}'''
EXE = ("/usr/bin/ncclras", None)  # trust.program's answer: found, and this process may run it


def test_a_missing_dead_rank_with_its_host_pid_and_gpu():
    report = ras.parse(json.dumps(ONE_DEAD))
    [r] = report.missing
    assert (r.rank, r.host, r.pid, r.gpu, r.unresponsive, r.dead) == (3, "node7", 4242, "3", True, True)
    assert not report.healthy and report.comms[0].ranks == 4
    assert ras.parse(AS_2_28_9_WRITES).missing == report.missing and report.version == "2.28.9"


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
    assert ras.supported(None) is None and ras.supported("2.28.7-a0") is True  # unknown: asked; a suffix read


def nccl_fr(version: str = "2.30.7", name: str = "nccl:all_reduce") -> dict:
    """An NCCL rank's record: torch's writer puts ProcessGroupNCCL's NCCL version in ``comm_lib_version``
    (torch/include/torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, lines 515 and 612)."""
    return {"version": "2.10", "comm_lib_version": version,
            "pg_status": {"0": {"last_enqueued_collective": "7", "last_completed_collective": "6"}},
            "entries": [{"collective_seq_id": 7, "pg_id": 0, "profiling_name": name, "state": "started",
                         "is_p2p": False}]}


def test_without_ncclras_on_the_node_ras_is_said_not_asked():
    """Issue 54 item 2: this machine has no ncclras (no GPU): the hang's document says RAS was not asked, and why."""
    out = ras.consult({0: nccl_fr(), 1: nccl_fr()}, [1])
    assert out["asked"] is False and "no `ncclras` on this node" in out["said"] and out["nccl_version"] == "2.30.7"
    old = ras.consult({0: nccl_fr("2.27.5")}, [1], program=EXE)
    assert old["asked"] is False and "NCCL 2.27.5" in old["said"] and "2.28.7" in old["said"]
    assert ras.consult({0: nccl_fr(name="gloo:all_reduce") | {"comm_lib_version": ""}}, [1]) is None  # gloo: none


def test_asked_ras_is_fused_with_the_records_culprit():
    dead = ras.consult({0: nccl_fr()}, [3], asker=lambda exe: ras.parse(json.dumps(ONE_DEAD)), program=EXE)
    assert dead["asked"] and dead["answered"] and dead["agrees"] and dead["missing"][0]["host"] == "node7"
    assert dead["said"] == "NCCL RAS agrees: rank 3 on node7 pid 4242 GPU 3 (considered dead) missing"
    other = ras.consult({0: nccl_fr()}, [1], asker=lambda exe: ras.parse(json.dumps(ONE_DEAD)), program=EXE)
    assert other["ras_only"] == [3] and "missing too, which the records did not name" in other["said"]
    healthy = ras.consult({0: nccl_fr()}, [2], asker=lambda exe: ras.parse(json.dumps(HEALTHY)), program=EXE)
    assert healthy["healthy_while_disagree"] and "healthy while the ranks disagree" in healthy["said"]
    silent = ras.consult({0: nccl_fr()}, [2], asker=lambda exe: "no answer within 10 s", program=EXE)
    assert silent["asked"] and not silent["answered"] and "no answer" in silent["said"]
    unknown = ras.consult({0: nccl_fr("")}, [3], asker=lambda exe: ras.parse(AS_2_28_9_WRITES), program=EXE)
    assert unknown["agrees"] and unknown["nccl_version"] == "2.28.9"  # 2.15's nccl2 leaves comm_lib_version empty


def test_as_root_an_ncclras_another_user_can_change_is_not_run(tmp_path, monkeypatch):
    import os

    import pytest

    from ddpdoctor import trust

    if os.geteuid() != 0:
        pytest.skip("root's rule")
    exe = tmp_path / "ncclras"
    exe.write_text("#!/bin/sh\necho '{}'\n")
    exe.chmod(0o755)
    os.chown(exe, 65534, 65534)  # nobody's
    monkeypatch.setattr("shutil.which", lambda name: str(exe))
    out = ras.consult({0: nccl_fr()}, [1], asker=lambda e: pytest.fail("ran a program nobody can change"))
    assert out["asked"] is False and "refused" in out["said"], out
    assert trust.program("ncclras")[0] is None


def test_the_watchdogs_hang_report_carries_ras_and_its_panel_says_it(monkeypatch):
    """run-trainer's watchdog (live/hang.py build_report) on an NCCL hang: ``hang.ras``, and the panel's line."""
    from pathlib import Path

    from ddpdoctor.forensics.live import hang
    from ddpdoctor.report.console_trainer import hang_rows

    class Agent:
        pid = 0

        def poll(self):
            return None

    monkeypatch.setattr("shutil.which", lambda name: None)
    evidence = {r: {"host": "n0", "pid": 100 + r, "state": "running", "fr": nccl_fr(), "stacks": None,
                    "local_rank": r} for r in (0, 1)}
    evidence[1]["fr"] = dict(nccl_fr(), pg_status={"0": {"last_enqueued_collective": "6",
                                                         "last_completed_collective": "6"}}, entries=[])
    w = hang.Watchdog(Agent(), Path("/nonexistent"), Path("/nonexistent"), 8.0, sockets="/nonexistent/{rank}.sock")
    report = w.build_report(evidence, 9.0, {"seconds": 8.0, "source": "--hang-timeout", "why": ""}, stop=False,
                            procs=[])
    assert report["ras"]["asked"] is False and "not asked" in report["ras"]["said"], report.get("ras")
    assert any("NCCL RAS not asked" in row.plain for row in hang_rows(report))


def test_attachs_hang_diagnosis_carries_ras(monkeypatch):
    from types import SimpleNamespace

    from ddpdoctor.forensics.attach import run

    monkeypatch.setattr("shutil.which", lambda name: None)
    reads = [SimpleNamespace(rank=r, recorded=SimpleNamespace(raw={"fr": nccl_fr()})) for r in (0, 1)]
    diagnosis = {"culprits": [{"rank": 1}]}
    run.add_ras(diagnosis, reads)
    assert diagnosis["ras"]["asked"] is False and "not asked" in diagnosis["ras"]["said"]
    gloo = {"culprits": [{"rank": 1}]}
    run.add_ras(gloo, [SimpleNamespace(rank=0, recorded=None)])
    assert "ras" not in gloo
