"""`ddpdoctor preflight --exit-codes nagios|npd` (another monitor reads the exit code and stdout) and
`--prometheus-textfile DIR` (node_exporter's textfile collector), in-process on the cheap local checks; the real
node_exporter reading the file: tests/integration/test_node_exporter.py."""
from __future__ import annotations

import pytest

from ddpdoctor.report import monitors, prometheus
from tests.unit.helpers import run_cli

CHEAP = ["--only", "resources", "--no-save"]
SHM_FAILS = ["--set", "resources.fail_shm_mib=1000000000", "--set", "resources.min_shm_mib=1000000000"]
QUIET = ["--set", "resources.min_free_disk_gib=0", "--set", "resources.min_available_memory_gib=0",
         "--set", "resources.min_nofile=0"]


def test_nagios_ok_and_critical_first_line_is_the_status():
    ok = run_cli("preflight", *CHEAP, *QUIET, "--exit-codes", "nagios")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[0].startswith("DDPDOCTOR OK - 1 checks passed, 0 skipped | fail=0 warn=0 pass=1")
    bad = run_cli("preflight", *CHEAP, *QUIET, *SHM_FAILS, "--exit-codes", "nagios")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    first, *rest = bad.stdout.splitlines()
    assert first.startswith("DDPDOCTOR CRITICAL - resources on ") and "/dev/shm is" in first and "| fail=1" in first
    assert rest and rest[0].startswith("FAIL resources on ") and "-- fix: docker run --shm-size=16g" in rest[0]


def test_npd_one_line_of_at_most_80_characters():
    bad = run_cli("preflight", *CHEAP, *QUIET, *SHM_FAILS, "--exit-codes", "npd")
    assert bad.returncode == 1
    assert len(bad.stdout.splitlines()) == 1 and len(bad.stdout.rstrip("\n")) <= 80
    assert bad.stdout.startswith("resources: /dev/shm is")
    ok = run_cli("preflight", *CHEAP, *QUIET, "--exit-codes", "npd")
    assert (ok.returncode, ok.stdout) == (0, "ddpdoctor: OK\n")


@pytest.mark.parametrize("style,code,start", [("nagios", 3, "DDPDOCTOR UNKNOWN - "),
                                              ("npd", 2, "ddpdoctor: unknown: ")])
def test_a_usage_error_is_the_monitors_unknown(style, code, start):
    for args in (["--no-such-flag"], ["--only", "nosuch"], ["--json"]):
        p = run_cli("preflight", *CHEAP, *args, "--exit-codes", style)
        assert p.returncode == code, (args, p.stdout, p.stderr)
        assert len(p.stdout.splitlines()) == 1 and p.stdout.startswith(start), p.stdout
        assert p.stderr.startswith("Error: ")


def test_warnings_are_nagios_warning_and_npd_ok():
    doc = {"verdict": "warn", "exit_code": 0, "results": [
        {"check": "clock-sync", "level": "warn", "summary": "clock | not synced", "nodes": ["n1"], "fix": "chronyd"}]}
    code, lines = monitors.nagios(doc)
    assert code == 1 and lines[0].startswith("DDPDOCTOR WARNING - clock-sync on n1: clock / not synced")
    assert lines[0].count("|") == 1  # only the performance data's
    assert monitors.npd(doc) == (0, ["ddpdoctor: OK, 1 warning(s)"])
    assert monitors.render(dict(doc, exit_code=5), "nagios")[0] == 3  # an unverified verdict is no OK


def test_prometheus_series_labels_as_dcgm_exporter():
    doc = {"kind": "preflight", "verdict": "fail", "created": "2026-11-27T19:00:00+00:00", "nodes": {"n1": {}},
           "results": [
               {"check": "resources", "level": "fail", "summary": "x", "nodes": ["n1"]},
               {"check": "resources", "level": "warn", "summary": "y", "nodes": ["n1"]},
               {"check": "gpu-health", "level": "fail", "summary": "z", "nodes": ["n1"],
                "details": {"gpu": 3, "uuid": "GPU-abc"}},
               {"check": "parity", "level": "fail", "summary": "other", "nodes": ["n2"]},
           ]}
    got = prometheus.samples(doc, command="preflight", hostname="n1", job="42")
    status = {(s[1]["check"], s[1].get("gpu")): s[2] for s in got if s[0] == "ddpdoctor_check_status"}
    assert status == {("resources", None): 3.0, ("gpu-health", "3"): 3.0}
    assert not any("level" in s[1] for s in got)  # the value is the level: a label would split the series
    gpu = next(s[1] for s in got if s[1].get("gpu") == "3")
    assert gpu["UUID"] == "GPU-abc" and gpu["Hostname"] == "n1" and gpu["hpc_job"] == "42"
    assert ("ddpdoctor_last_run_timestamp_seconds", 1795806000.0) in [(s[0], s[2]) for s in got]


def test_prometheus_file_keeps_other_commands_series_and_is_replaced_atomically(tmp_path):
    bench = {"kind": "nccl-bench", "verdict": "pass", "created": "2026-11-27T19:00:00+00:00",
             "rows": [{"op": "all_reduce", "size": 1024, "dtype": "float32",
                       "out_of_place": None, "in_place": {"busbw_gbs": 0.5}}]}
    pre = {"kind": "preflight", "verdict": "pass", "created": "2026-11-27T19:01:00+00:00", "nodes": {"h": {}},
           "results": [{"check": "resources", "level": "pass", "summary": "", "nodes": ["h"]}]}
    prometheus.write(tmp_path, prometheus.samples(bench, command="nccl-bench", hostname="h"), "nccl-bench")
    prometheus.write(tmp_path, prometheus.samples(pre, command="preflight", hostname="h"), "preflight")
    pre["results"][0]["level"] = "fail"
    path = prometheus.write(tmp_path, prometheus.samples(pre, command="preflight", hostname="h"), "preflight")
    text = path.read_text()
    assert 'ddpdoctor_bus_bandwidth_gbs{Hostname="h",collective="all_reduce",command="nccl-bench",dtype="float32",' \
           'message_size="1024",placement="in_place"} 0.5' in text
    assert text.count("ddpdoctor_check_status{") == 1 and 'check="resources",command="preflight"} 3.0' in text
    assert text.count("# TYPE ddpdoctor_last_run_timestamp_seconds gauge") == 1
    assert text.count("ddpdoctor_last_run_timestamp_seconds{") == 2  # one per command
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ddpdoctor.prom.lock", "ddpdoctor.prom"]


def node_check_doc(action: str, ok: bool = True, job: str | None = "7") -> dict:
    return {"kind": "preflight", "verdict": "fail" if action == "drain" else "pass",
            "created": "2026-11-28T22:00:00+00:00", "timings": {"gather_s": 0.1, "compare_s": 0.01},
            "nodes": {"n1": {"gather": {"resources": {"status": "ok"},
                                        "torch-build": {"status": "skip", "message": "not finished within the 3 s "
                                                        "budget: skipped", "for_time": True},
                                        "gpu": {"status": "skip", "message": "no NVIDIA driver"}}}},
            "results": [{"check": "resources", "level": "fail" if action == "drain" else "pass", "summary": "shm",
                         "nodes": ["n1"]}],
            "node_check": {"context": "prolog", "job_id": job, "elapsed_s": 0.25, "action": action,
                           "scontrol": {"ok": ok} if action in ("drain", "resume") else None}}


def test_node_check_series_carry_no_job_count_drains_and_resumes_and_tell_a_skip_for_time(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # a prolog's environment: still no hpc_job label
    for action, ok in (("drain", True), ("none", True), ("resume", True), ("drain", False), ("drain", True)):
        path = prometheus.write(tmp_path, prometheus.node_check_samples(node_check_doc(action, ok), hostname="n1"),
                                "node-check")
    text = path.read_text()
    assert "hpc_job" not in text and "level=" not in text
    assert 'ddpdoctor_node_drains_total{Hostname="n1",command="node-check"} 2.0' in text  # the failed scontrol: not
    assert 'ddpdoctor_node_resumes_total{Hostname="n1",command="node-check"} 1.0' in text
    assert "# TYPE ddpdoctor_node_drains_total counter" in text
    assert 'ddpdoctor_check_skipped_for_time{Hostname="n1",check="torch-build",command="node-check"} 1.0' in text
    assert 'ddpdoctor_check_skipped_for_time{Hostname="n1",check="gpu",command="node-check"} 0.0' in text
    assert 'ddpdoctor_run_duration_seconds{Hostname="n1",command="node-check"} 0.25' in text
    pre = prometheus.samples({"kind": "preflight", "timings": {"gather_s": 1.5, "compare_s": 0.5}}, command="preflight",
                             hostname="n1", job="9")
    assert ("ddpdoctor_run_duration_seconds", {"Hostname": "n1", "command": "preflight", "hpc_job": "9"}, 2.0) in pre


def test_prometheus_textfile_flag(tmp_path):
    p = run_cli("preflight", *CHEAP, *QUIET, "--prometheus-textfile", str(tmp_path))
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "ddpdoctor.prom").read_text()
    assert "# HELP ddpdoctor_check_status" in text and 'check="resources"' in text
    missing = run_cli("preflight", *CHEAP, "--prometheus-textfile", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such directory" in missing.stderr
