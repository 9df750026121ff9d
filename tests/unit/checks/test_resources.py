"""Unit tests of checks/resources.py."""
from __future__ import annotations

from ddpdoctor_checks import (
    resources,
)

from ddpdoctor.api import Level, NodeContext
from tests.unit.helpers import levels, only


# ---------------------------------------------------------------- resources
def res_facts(**kw):
    base = {"nofile": {"soft": 65536, "hard": 65536}, "memlock": {"soft": None, "hard": None},
            "infiniband": False, "cpu_count": 8, "cpu_affinity": 8,
            "shm": {"path": "/dev/shm", "free_bytes": 16 << 30, "total_bytes": 16 << 30},
            "disk": {"path": "/tmp", "free_bytes": 100 << 30, "total_bytes": 200 << 30},
            "memory": {"total_bytes": 64 << 30, "available_bytes": 60 << 30}}
    base.update(kw)
    return base


def judge_res(facts, **opts):
    check = resources.ResourcesCheck()
    return check.compare({"n1": facts}, {k: o.default for k, o in check.options.items()} | opts)


def test_resources_gather_real(tmp_path):
    facts = resources.ResourcesCheck().gather(NodeContext(node="n1", run={"output_dir": str(tmp_path)}))
    assert facts["shm"]["total_bytes"] > 0 and facts["disk"]["path"] == str(tmp_path)
    assert facts["cpu_count"] >= 1


def test_resources_pass():
    assert levels(judge_res(res_facts())) == [Level.PASS]


def test_docker_default_shm_fails_small_shm_warns():
    docker = res_facts(shm={"path": "/dev/shm", "free_bytes": 64 << 20, "total_bytes": 64 << 20})
    (f,) = only(judge_res(docker), Level.FAIL)
    assert "64 MiB" in f.summary and "--shm-size" in f.fix
    assert only(judge_res(res_facts(shm={"total_bytes": 512 << 20})), Level.WARN)


def test_limits_disk_memory():
    res = judge_res(res_facts(nofile={"soft": 1024, "hard": 4096}, memlock={"soft": 65536, "hard": 65536},
                              infiniband=True, disk={"path": "/x", "free_bytes": 1 << 20},
                              memory={"total_bytes": 4 << 30, "available_bytes": 1 << 29}))
    assert len(only(res, Level.FAIL)) == 1 and "memlock" in only(res, Level.FAIL)[0].fix
    warn = " | ".join(r.summary for r in only(res, Level.WARN))
    assert "open-files" in warn and "free in /x" in warn and "memory available" in warn
