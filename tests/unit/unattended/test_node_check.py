"""The unattended node check's decisions as data (unattended/node_check.py), SLURM's node line
(launchers/slurm_node.py), the site config, and `ddpdoctor node-check` end to end with a stand-in scontrol that
records what it is asked (the real SLURM: tests/integration/test_slurm_node_check.py)."""
from __future__ import annotations

import json
import stat

import pytest

from ddpdoctor.errors import UsageError
from ddpdoctor.launchers import slurm_node
from ddpdoctor.unattended import node_check as nc
from ddpdoctor.unattended import site
from tests.unit.helpers import run_cli

DRAINED_BY_US = slurm_node.NodeState("n1", "IDLE+DRAIN", "ddpdoctor: resources: /dev/shm is 64 MiB")
DRAINED_BY_ADMIN = slurm_node.NodeState("n1", "MIXED+DRAIN", "admin: new DIMM")
IDLE = slurm_node.NodeState("n1", "IDLE", "")
SHM = nc.Finding("resources", "fail", "/dev/shm is 64 MiB: NCCL and DataLoader workers fail")


@pytest.mark.parametrize("env,context,job", [
    ({"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n1"}, "prolog", "12"),
    ({"SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n1"}, "epilog", "12"),
    ({"SLURMD_NODENAME": "n1"}, "health_check", None),  # what slurmd 22.05 gives a health check, and no more
    ({"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7"}, "prolog", "7"),  # a prolog before SLURM_SCRIPT_CONTEXT existed
    ({"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, "manual", "7"),  # srun'd by a person
    ({"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": "/home/a"}, "manual", "7"),  # a batch script
    ({}, "manual", None),
])
def test_where_reads_slurms_context(env, context, job):
    at = nc.where(env, hostname="n1.cluster.example")
    assert (at.context, at.node, at.job_id) == (context, "n1", job)


def test_decide_drains_resumes_and_never_touches_an_admins_drain():
    assert nc.decide([SHM], IDLE).action == "drain"
    d = nc.decide([SHM], IDLE)
    assert d.fails and d.reason == "ddpdoctor: resources: /dev/shm is 64 MiB: NCCL and DataLoader workers fail"
    assert nc.decide([SHM], DRAINED_BY_ADMIN).action == "leave" and nc.decide([SHM], DRAINED_BY_ADMIN).fails
    assert nc.decide([], DRAINED_BY_ADMIN).action == "leave"
    assert nc.decide([], DRAINED_BY_US, rechecked=frozenset({("resources", nc.NODE)})).action == "resume"
    assert nc.decide([], IDLE).action == "none"
    same = slurm_node.NodeState("n1", "IDLE+DRAIN", d.reason)
    assert nc.decide([SHM], same).action == "keep"
    other = nc.Finding("gpu", "fail", "GPU 3 fell off the bus")
    assert nc.decide([other], DRAINED_BY_US).action == "drain"  # our own reason, brought up to date
    assert nc.decide([SHM], None).action == "none" and nc.decide([SHM], None).fails  # not under SLURM


def test_a_drain_is_lifted_only_by_a_run_that_re_measured_its_cause():
    """The meeting drained node3 for its clock; a health check holds no meeting: it passes, and the drain stays
    (before: it resumed, the requeued job came back, its prolog drained it again, every HealthCheckInterval)."""
    skew = nc.Finding("clock-skew", "fail", "node3 is 5.0 s ahead of node1 (0.5 s allowed)", nc.MEETING)
    drained = nc.decide([skew], slurm_node.NodeState("node3", "IDLE", ""))
    assert drained.reason.startswith("ddpdoctor: clock-skew [meeting]: node3 is 5.0 s ahead")
    assert drained.reason.endswith("once fixed: scontrol update NodeName=node3 State=RESUME")
    assert slurm_node.drain_cause(drained.reason) == ("clock-skew", nc.MEETING)
    now = slurm_node.NodeState("node3", "IDLE+DRAIN", drained.reason)
    health = {"results": [{"check": "resources", "level": "pass", "summary": "ok"},
                          {"check": "clock-sync", "level": "pass", "summary": "ok"}]}
    d = nc.decide([], now, rechecked=nc.rechecked_by(health, None, "node3", "fail"))
    assert d.action == "keep" and "not re-checked" in d.why and "meeting" in d.why, d
    meeting = {"verdict": "pass", "checks": ["mesh", "names", "clock-skew", "parity"], "results": []}
    assert nc.decide([], now, rechecked=nc.rechecked_by(health, meeting, "node3", "fail")).action == "resume"
    still = dict(meeting, verdict="fail", results=[{"check": "clock-skew", "level": "fail", "nodes": ["node3"]}])
    assert nc.decide([], now, rechecked=nc.rechecked_by(health, still, "node3", "fail")).action == "keep"
    skipped = {"results": [{"check": "resources", "level": "skip", "summary": "budget"}]}
    assert nc.decide([], DRAINED_BY_US, rechecked=nc.rechecked_by(skipped, None, "n1", "fail")).action == "keep"
    assert nc.decide([], DRAINED_BY_US, rechecked=nc.rechecked_by(health, None, "n1", "fail")).action == "resume"
    assert slurm_node.drain_cause("ddpdoctor: failed") == ("", "")  # a reason of another shape: held, said


def test_a_drain_reason_keeps_the_part_that_names_what_broke():
    path = "/opt/venvs/train/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"
    r = slurm_node.drain_reason("torch-build", f"torch does not import: {path}: file too short; fix: pip install "
                                "torch", "", "node3")
    assert path in r and len(r) <= slurm_node.MAX_REASON and "State=RESUME" not in r


def test_only_draining_levels_drain_and_never_the_tools_own_failure():
    doc = {"results": [
        {"check": "gpu", "level": "fail", "summary": "check 'gpu' could not gather facts", "details": {"tool_error": True}},
        {"check": "resources", "level": "fail", "summary": "shm"},
        {"check": "clock-sync", "level": "warn", "summary": "clock"},
    ]}
    assert [f.check for f in nc.findings_that_drain(doc, "fail")] == ["resources"]
    assert [f.check for f in nc.findings_that_drain(doc, "warn")] == ["resources", "clock-sync"]
    assert nc.findings_that_drain(doc, "never") == []


def test_scontrol_node_line_and_our_reason():
    line = ("NodeName=node3 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 Weight=1 "
            "Partitions=debug CurrentWatts=0 Reason=ddpdoctor: test: mine [root@2026-11-27T18:44:27]\n")
    got = slurm_node.parse_show("node3", line)
    assert (got.state, got.reason, got.drained, got.drained_by_us) == ("IDLE+DRAIN", "ddpdoctor: test: mine", True, True)
    assert not slurm_node.parse_show("node3", "NodeName=node3 State=MIXED Reason=(null)\n").drained
    assert slurm_node.parse_show("node3", "garbage").error
    reason = slurm_node.drain_reason("resources", 'a "quoted"\nfinding ' + "x" * 300)
    assert reason.startswith("ddpdoctor: resources: a quoted finding") and len(reason) == slurm_node.MAX_REASON
    assert slurm_node.scontrol_path("/opt/x/scontrol") == "/opt/x/scontrol"


def test_site_config_is_typed_and_bad_values_are_one_line(tmp_path):
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text('[node-check]\nresults_dir = "/r"\ndrain_on = "warn"\nskip = ["gpu-perf"]\nbudget_s = 5\n'
                   '[checks.resources]\nmin_shm_mib = 2048\n')
    got = site.load(str(cfg))
    assert (got.results_dir, got.drain_on, got.skip, got.budget_s) == ("/r", "warn", ("gpu-perf",), 5.0)
    for body, needle in (('drain_on = "always"', "drain_on must be one of"), ("keep = 0", "keep"),
                         ("nosuch = 1", "unknown key node-check.nosuch"), ("skip = 'gpu'", "list of check names")):
        cfg.write_text(f"[node-check]\n{body}\n")
        with pytest.raises(UsageError, match=needle):
            site.load(str(cfg))
    with pytest.raises(UsageError, match="no such file"):
        site.load(str(tmp_path / "absent.toml"))
    assert site.config_path({"DDPDOCTOR_CONFIG": str(cfg)}) == (str(cfg), True)


def test_keep_prunes_a_nodes_oldest_records(tmp_path):
    folder = tmp_path / "n1"
    folder.mkdir()
    for i in range(12):
        (folder / f"2026112{i:02d}-health_check.json").write_text("{}")
    nc.keep({"schema": "ddpdoctor"}, folder / "20261199-health_check.json", keep_n=5)
    assert sorted(p.name for p in folder.iterdir())[-1] == "20261199-health_check.json"
    assert len(list(folder.iterdir())) == 5


@pytest.fixture
def fake_slurm(tmp_path):
    """A stand-in scontrol: `show node` answers from state.txt, `update` appends its argv to calls.txt."""
    state, calls = tmp_path / "state.txt", tmp_path / "calls.txt"
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then cat {state}; exit 0; fi\n"
                      f"printf '%s|' \"$@\" >> {calls}; echo >> {calls}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{tmp_path / "results"}"\nscontrol = "{script}"\n'
                   'only = ["resources"]\n[checks.resources]\nmin_free_disk_gib = 0.0\n'
                   'min_available_memory_gib = 0.0\nmin_nofile = 0\n')
    return cfg, state, calls


def _node_check(cfg, context: str, *extra: str, **env: str):
    base = {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"}
    if context == "prolog":
        base.update(SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="99")
    return run_cli("node-check", *extra, env={**base, **env})


def test_prolog_on_a_failing_node_drains_it_and_exits_1_then_a_health_check_resumes_it(fake_slurm, tmp_path):
    cfg, state, calls = fake_slurm
    state.write_text("NodeName=n1 State=IDLE Reason=(null)\n")
    cfg.write_text(cfg.read_text() + "fail_shm_mib = 1000000000\nmin_shm_mib = 1000000000\n")
    p = _node_check(cfg, "prolog")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "ddpdoctor node check on n1 (prolog, job 99): FAIL resources: /dev/shm is" in p.stdout
    assert calls.read_text().startswith("update|NodeName=n1|State=DRAIN|Reason=ddpdoctor: resources: /dev/shm is ")
    (record,) = (tmp_path / "results" / "n1").glob("*-prolog-99.json")
    kept = json.loads(record.read_text())["node_check"]
    assert (kept["action"], kept["job_id"], kept["scontrol"]["ok"]) == ("drain", "99", True)

    state.write_text("NodeName=n1 State=IDLE+DRAIN Reason=ddpdoctor: resources: /dev/shm is 1 MiB [root@x]\n")
    cfg.write_text(cfg.read_text().replace("fail_shm_mib = 1000000000\nmin_shm_mib = 1000000000\n", ""))
    calls.write_text("")
    p = _node_check(cfg, "health_check")
    assert p.returncode == 0 and "PASS; resumed" in p.stdout, p.stdout + p.stderr
    assert calls.read_text() == "update|NodeName=n1|State=RESUME|\n"

    state.write_text("NodeName=n1 State=IDLE+DRAIN Reason=admin: new DIMM [root@x]\n")
    calls.write_text("")
    p = _node_check(cfg, "health_check")
    assert p.returncode == 0 and "drained by someone else (admin: new DIMM)" in p.stdout
    assert calls.read_text() == ""  # never touched
    assert _node_check(cfg, "health_check", "--dry-run").returncode == 0


def test_the_tools_own_failure_under_slurm_exits_0(tmp_path, monkeypatch, capsys):
    """A bad site config fails the command (exit 2) for a person; under SLURM the console script exits 0: the job
    is not failed and the node not drained for the tool's own fault."""
    from ddpdoctor.cli import node_check_cmd

    bad = tmp_path / "site.toml"
    bad.write_text("[node-check]\ndrain_on = 'always'\n")
    assert run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(bad)}).returncode == 2
    monkeypatch.setattr("sys.argv", ["ddpdoctor-slurm-check"])
    monkeypatch.setattr(node_check_cmd, "STARTED", None)  # main() sets the process's start: the next in-process
    # node check in this worker would count its budget from then and skip every check
    monkeypatch.setattr("signal.signal", lambda *a: None)  # pytest's own handlers stay

    def exit_here(code):  # the real _exit may os._exit() a process with other threads (an xdist worker)
        raise SystemExit(code)

    monkeypatch.setattr("ddpdoctor.cli._exit", exit_here)
    for key, value in {"DDPDOCTOR_CONFIG": str(bad), "SLURMD_NODENAME": "n1",
                       "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "5"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as ended:
        node_check_cmd.main()
    assert ended.value.code == 0
    assert "neither drained nor the job failed" in capsys.readouterr().err
    # the console script's start and its watchdog stay with its own run: a later run in this process (a test's) is
    # not bounded from this process's start, nor ended by a watchdog
    assert node_check_cmd.STARTED is None


def test_a_failing_prolog_comments_and_requeues_its_job_but_a_dry_run_acts_on_nothing(fake_slurm):
    cfg, state, calls = fake_slurm
    state.write_text("NodeName=n1 State=IDLE Reason=(null)\n")
    cfg.write_text(cfg.read_text() + "fail_shm_mib = 1000000000\nmin_shm_mib = 1000000000\n")
    p = _node_check(cfg, "prolog")
    assert p.returncode == 1, p.stdout + p.stderr
    drain, comment, requeue = calls.read_text().splitlines()
    assert drain.startswith("update|NodeName=n1|State=DRAIN|")
    assert comment.startswith("update|JobId=99|Comment=ddpdoctor: n1 failed its prolog (resources: /dev/shm is ")
    assert comment.endswith("); the job was requeued|") and requeue == "requeue|99|"
    calls.write_text("")
    state.write_text("NodeName=n1 State=IDLE+DRAIN Reason=admin: new DIMM [root@x]\n")  # still fails: exit 1
    p = _node_check(cfg, "prolog", "--dry-run")
    assert p.returncode == 1 and calls.read_text() == "", (p.stdout, calls.read_text())
