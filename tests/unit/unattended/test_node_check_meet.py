"""The opt-in cross-node meeting of a job's prologs (unattended/meet.py): which node the meeting's results blame,
the per-job token, the site key's trust; on the real SLURM: tests/integration/test_slurm_prolog_meeting.py."""
from __future__ import annotations

import json
import os

import pytest

from ddpdoctor.unattended import meet

LINK = "link {} -> node3 timed out (TCP to 198.18.3.3:36985)"


def doc(*results):
    return {"results": [{"check": c, "level": lv, "summary": s, "nodes": n} for c, lv, s, n in results]}


def test_the_node_every_failing_link_names_is_the_wrong_one_and_only_it():
    found = doc(("mesh", "fail", LINK.format("node1"), ["node1", "node3"]),
                ("mesh", "fail", LINK.format("node2"), ["node2", "node3"]))
    (f,) = meet.mine(found, "node3")
    assert f.check == "mesh" and f.summary.startswith("node3 is the node common to 2 failing results")
    assert meet.mine(found, "node1") == [] and meet.mine(found, "node2") == []
    one_link = doc(("mesh", "fail", LINK.format("node1"), ["node1", "node3"]))
    assert meet.mine(one_link, "node3") == [] and meet.mine(one_link, "node1") == []  # whose fault: unknown
    alone = doc(("clock-skew", "fail", "node2 is 3 s off", ["node2"]), ("names", "warn", "slow", ["node1"]))
    assert [f.check for f in meet.mine(alone, "node2")] == ["clock-skew"] and meet.mine(alone, "node1") == []


def test_the_token_is_per_job_and_the_key_must_be_roots_alone(tmp_path):
    key = b"0123456789abcdef0123456789abcdef"
    assert meet.job_token(key, "41") != meet.job_token(key, "42") != meet.job_token(key + b"x", "42")
    path = tmp_path / "cross.key"
    path.write_bytes(key + b"\n")
    path.chmod(0o600)
    if os.geteuid() == 0:
        assert meet.site_key(str(path)) == key
    path.chmod(0o640)
    with pytest.raises(ValueError, match="refused"):
        meet.site_key(str(path))
    path.chmod(0o600)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(ValueError):
        meet.site_key(str(link))
    path.write_bytes(b"short")
    with pytest.raises(ValueError, match="refused"):
        meet.site_key(str(path))


def test_a_one_node_job_or_a_missing_key_never_meets():
    from ddpdoctor.unattended.node_check import Where
    from ddpdoctor.unattended.site import SiteConfig

    at = Where("prolog", "node1", "7")
    cfg = SiteConfig(cross_node=True, cross_node_key="/nonexistent/key")
    assert meet.meet(at, cfg, {"SLURM_JOB_NODELIST": "node1"}, 0.0)[1]["skipped"].startswith("not a multi-node")
    found, record = meet.meet(at, cfg, {"SLURM_JOB_NODELIST": "node[1-3]"}, 0.0)
    assert found == [] and "cross_node_key /nonexistent/key" in record["skipped"]


@pytest.mark.skipif(os.geteuid() != 0, reason="what root starts: needs root")
def test_the_meetings_child_never_imports_a_package_planted_where_root_runs_it(tmp_path, monkeypatch):
    """A ``ddpdoctor/`` (or ``torch/``) folder in the prolog's cwd, in a folder another user owns, or on the job's
    PYTHONPATH is never what root runs: the child is isolated, in a root-owned cwd, with a clean environment."""
    import pwd
    import time

    from ddpdoctor.unattended.node_check import Where
    from ddpdoctor.unattended.site import SiteConfig

    nobody = pwd.getpwnam("nobody")
    planted = tmp_path / "users"
    marker = tmp_path / "ran-as-root"
    for pkg in ("ddpdoctor", "torch"):
        (planted / pkg).mkdir(parents=True)
        for name in ("__init__.py", "__main__.py"):
            (planted / pkg / name).write_text(f"open({str(marker)!r}, 'a').write('{pkg} ')\n")
    for p in (planted, *planted.rglob("*")):
        os.chown(p, nobody.pw_uid, nobody.pw_gid)
    key = tmp_path / "cross.key"
    key.write_bytes(os.urandom(24).hex().encode())
    key.chmod(0o600)
    monkeypatch.chdir(planted)
    env = {"SLURM_JOB_NODELIST": "nosuchnode-a,nosuchnode-b", "PYTHONPATH": str(planted),
           "PYTHONSTARTUP": str(planted / "ddpdoctor" / "__init__.py"), "PATH": f"{planted}:/usr/bin:/bin"}
    found, record = meet.meet(Where("prolog", "nosuchnode-a", "7"), SiteConfig(cross_node=True,
                              cross_node_key=str(key)), env, time.monotonic() + 20)
    assert not marker.exists(), marker.read_text()
    assert found == [] and record["nodes"] == ["nosuchnode-a", "nosuchnode-b"], record
    assert "does not resolve" in json.dumps(record), record  # the real ddpdoctor ran, and said why it could not meet


def test_the_meetings_child_environment_holds_nothing_of_the_jobs():
    env = meet.child_env("tok")
    assert env["DDPDOCTOR_TOKEN"] == "tok" and set(env) == {"PATH", "LANG", "HOME", "DDPDOCTOR_TOKEN"}
    assert env["PATH"] == meet.SAFE_PATH


def _run_meet_capturing(monkeypatch, tmp_path, result):
    """meet() on a 3-node job with subprocess.run replaced: (the argv and timeout it ran the child with, its
    findings and record)."""
    import subprocess
    import time

    from ddpdoctor.unattended.node_check import Where
    from ddpdoctor.unattended.site import SiteConfig

    key = tmp_path / "cross.key"
    key.write_bytes(os.urandom(24).hex().encode())
    key.chmod(0o600)
    seen = {}

    def run(argv, **kw):
        seen.update(argv=argv, **kw)
        return subprocess.CompletedProcess(argv, *result)

    monkeypatch.setattr(meet, "site_key", lambda path: b"k" * 32)  # as any user: the key's trust is tested above
    monkeypatch.setattr(subprocess, "run", run)
    found, record = meet.meet(Where("prolog", "node2", "7"), SiteConfig(cross_node=True, cross_node_key=str(key)),
                              {"SLURM_JOB_NODELIST": "node[1-3]"}, time.monotonic() + 10)
    return seen, found, record


def test_a_meetings_nodes_may_join_until_near_its_end_and_the_child_ends_within_it(monkeypatch, tmp_path):
    """A worker's connection is retried until the child's --timeout from its own start: after the interpreter and
    torch's import (seconds on a loaded node), so the window is most of the budget, not half of it."""
    seen, _, _ = _run_meet_capturing(monkeypatch, tmp_path, (3, "", "Error: x"))
    window = float(seen["argv"][seen["argv"].index("--timeout") + 1])
    assert 6.0 <= window <= 10 - 2.5, seen["argv"]
    assert seen["timeout"] <= 10.0 and seen["cwd"] == "/"


def test_a_node_whose_torch_does_not_import_fails_its_own_prolog_with_that_reason(monkeypatch, tmp_path):
    said = ("Error: this node cannot join: torch does not import here (ImportError: libtorch_cpu.so: file too "
            "short); the nodes meet on torch's TCPStore, so the master reports it missing. Fix: `python -m pip "
            "install torch` in the environment the job runs in")
    _, found, record = _run_meet_capturing(monkeypatch, tmp_path, (3, "", said))
    (f,) = found
    assert f.check == "cross-node" and f.level == "fail" and "libtorch_cpu.so: file too short" in f.summary
    assert "pip install torch" in f.summary and "skipped" in record
    _, found, _ = _run_meet_capturing(monkeypatch, tmp_path, (3, "", "Error: master node1:29657 does not resolve"))
    assert found == []  # a peer's or the network's business: the meeting is skipped, this node not blamed


def test_a_meeting_child_that_dies_of_a_native_crash_fails_its_node_and_one_stopped_or_killed_does_not(
        monkeypatch, tmp_path):
    """A child killed by SIGBUS or SIGSEGV (native code it loaded crashed: a library cut short or mismatched) was a
    skipped meeting and the node passed; its jobs' `import torch` die the same way. SIGKILL (the OOM killer, the
    budget) and SIGTERM (a stop) say nothing of the node: still skipped."""
    import signal

    for sig in (signal.SIGBUS, signal.SIGSEGV):
        _, found, record = _run_meet_capturing(monkeypatch, tmp_path, (-sig, "", ""))
        (f,) = found
        assert f.level == "fail" and f"died of {sig.name}" in f.summary and "--force-reinstall torch" in f.summary
        assert "skipped" in record
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGABRT):
        _, found, record = _run_meet_capturing(monkeypatch, tmp_path, (-sig, "", ""))
        assert found == [] and "skipped" in record, sig


def test_the_prolog_gives_the_meeting_its_whole_budget_and_keeps_its_own_after_it():
    from ddpdoctor.unattended import entry
    from ddpdoctor.unattended.node_check import Where
    from ddpdoctor.unattended.site import SiteConfig

    cfg = SiteConfig(cross_node=True, cross_node_budget_s=10, prolog_budget_s=3)
    assert entry.meeting_deadline(cfg, 100.0) == 110.0  # was 108: the reserve came out of the meeting's share
    assert entry.budget_of(cfg, Where("prolog", "node1", "7")) == 13.0


def test_the_meeting_runs_the_checks_that_say_they_belong_there_plugins_included():
    from ddpdoctor.api import Check
    from ddpdoctor.registry import installed

    class LinkMtu(Check):  # a site's plugin: a cluster check for the meeting
        name, phase, cross_node = "site-mtu", "cluster", True

    class Local(Check):
        name = "site-local"

    checks, judges = meet.meeting_checks({**installed(), "site-mtu": LinkMtu(), "site-local": Local()})
    assert "site-mtu" in checks and "site-mtu" in judges and "site-local" not in checks
    # the built-in four meet, and torch-build and packages come so that parity compares what breaks jobs
    assert {"mesh", "names", "clock-skew", "parity"} <= judges and {"torch-build", "packages"} <= set(checks)
    assert "torch-build" not in judges  # a local check's failure is its node's own prolog's business


def test_no_check_is_named_in_the_unattended_engine():
    from pathlib import Path

    from ddpdoctor.registry import installed

    import ast

    engine = Path(meet.__file__).parent
    for source in engine.glob("*.py"):
        tree = ast.parse(source.read_text())
        docs = {id(b[0].value) for b in [getattr(n, "body", None) for n in ast.walk(tree)]
                if isinstance(b, list) and b and isinstance(b[0], ast.Expr)}  # docstrings: examples, not code
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and id(n) not in docs}
        named = sorted(set(installed()) & strings)
        assert named == [], f"{source.name} names {named}: a check says it belongs in the meeting (Check.cross_node)"


def test_only_the_meetings_cluster_checks_blame_a_node():
    found = doc(("torch-build", "fail", "CUDA 12.1 but the driver supports 11.8", ["node3"]),
                ("parity", "fail", "torch-build torch_version on node3 differs: '2.12.0' vs '2.13.0' on the others",
                 ["node3"]))
    (f,) = meet.mine(found, "node3", frozenset({"parity", "mesh"}))
    assert f.check == "parity" and f.source == "meeting" and "2.12.0" in f.summary


def test_parity_in_the_meeting_names_the_node_with_another_torch_and_blames_no_side_of_a_tie():
    from ddpdoctor_checks.parity import ParityCheck

    p = ParityCheck()

    def node(torch, nccl="2.21.5"):
        return {"comparable": {"torch-build": {"torch_version": torch, "nccl_version": nccl},
                               "packages": {"torch": torch}}}

    out = p.compare({"node1": node("2.13.0"), "node2": node("2.13.0"), "node3": node("2.12.0")}, p.with_defaults({}))
    fails = [r for r in out if r.level == "fail"]
    assert fails and all(r.nodes == ["node3"] for r in fails), [(r.summary, r.nodes) for r in out]
    tie = p.compare({"node1": node("2.13.0"), "node2": node("2.12.0")}, p.with_defaults({}))
    (t, *_) = [r for r in tie if r.level == "fail"]
    assert "no majority" in t.summary and sorted(t.nodes) == ["node1", "node2"]
    assert meet.mine({"results": [{"check": "parity", "level": "fail", "summary": t.summary, "nodes": t.nodes}]},
                     "node2", frozenset({"parity"})) == []  # a tie blames no side


def test_a_failing_link_names_both_nodes_and_one_of_them_comments_the_job_when_no_node_is_blamed():
    one_link = doc(("mesh", "fail", LINK.format("node1"), ["node1", "node3"]),
                   ("names", "fail", "node2 does not resolve", ["node2"]))
    assert meet.failing_links(one_link, frozenset({"mesh"})) == [
        {"check": "mesh", "nodes": ["node1", "node3"], "summary": LINK.format("node1")}]
    assert meet.link_commenter({"links": meet.failing_links(one_link), "blamed": []}) == "node1"
    assert meet.link_commenter({"links": meet.failing_links(one_link), "blamed": ["node2"]}) is None
    assert meet.link_commenter({"links": [], "blamed": []}) is None


def test_a_prolog_whose_meeting_found_a_failing_link_comments_the_job_and_writes_the_link_series(
        monkeypatch, tmp_path):
    """Issue 56.5: a link that blames no node is said in the job's comment (both nodes, the port, what answered)
    and as ddpdoctor_meeting_link_status{peer}; the prolog passes and the job is not requeued."""
    import stat

    from tests.unit.helpers import run_cli

    state, calls = tmp_path / "state.txt", tmp_path / "calls.txt"
    state.write_text("NodeName=node1 State=ALLOCATED Reason=(null)\n")
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then cat {state}; exit 0; fi\n"
                      f"printf '%s|' \"$@\" >> {calls}; echo >> {calls}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    prom = tmp_path / "prom"
    prom.mkdir()
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{tmp_path / "results"}"\nscontrol = "{script}"\n'
                   f'prometheus_textfile = "{prom}"\ncross_node = true\nonly = ["resources"]\n'
                   '[checks.resources]\nmin_free_disk_gib = 0.0\nmin_available_memory_gib = 0.0\nmin_nofile = 0\n')
    summary = "link node1 -> node3 timed out (TCP to 198.18.4.3:41234)"
    record = {"nodes": ["node1", "node2", "node3"], "port": 29657, "checks": ["mesh"], "verdict": "fail",
              "results": [{"check": "mesh", "level": "fail", "summary": summary, "nodes": ["node1", "node3"]}],
              "links": [{"check": "mesh", "nodes": ["node1", "node3"], "summary": summary}], "blamed": []}
    monkeypatch.setattr(meet, "meet", lambda *a, **k: ([], record))
    env = {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "node1", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-3]"}
    p = run_cli("node-check", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    (comment,) = calls.read_text().splitlines()  # no drain, no requeue
    assert comment.startswith("update|JobId=7|Comment=ddpdoctor: the meeting of the job nodes found mesh: link "
                              "node1 -> node3 timed out (TCP to 198.18.4.3:41234); no node drained"), comment
    assert comment.endswith("not requeued (same nodes, same link): resubmit with --exclude=node3 (or node1)|"), comment
    text = (prom / "ddpdoctor.prom").read_text()
    assert 'ddpdoctor_meeting_link_status{Hostname=' in text
    line = next(ln for ln in text.splitlines() if ln.startswith("ddpdoctor_meeting_link_status{"))
    assert 'peer="node3"' in line and 'check="mesh"' in line and 'command="node-check-meeting"' in line
    assert line.endswith(" 3.0"), line
    calls.write_text("")
    env["SLURMD_NODENAME"] = "node2"  # the other nodes of the job pass and write no comment
    state.write_text("NodeName=node2 State=ALLOCATED Reason=(null)\n")
    assert run_cli("node-check", env=env).returncode == 0 and calls.read_text() == ""
