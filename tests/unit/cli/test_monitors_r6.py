"""Round 6 (issue 47, item 9) of the monitors' outputs: a name that is not UTF-8, a huge file to merge, a textfile
directory of 5,000 characters or none, npd's stdout on a full device. Each fails on the code before the round."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from ddpdoctor.report import prometheus
from tests.unit.helpers import run_cli

CHEAP = ("preflight", "--only", "env-vars", "--no-save", "-q")


def test_9_a_job_id_that_is_not_utf8_keeps_a_passing_preflight_passing(tmp_path):
    p = run_cli(*CHEAP, "--prometheus-textfile", str(tmp_path), env={"SLURM_JOB_ID": "12\udcff"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert 'hpc_job="12\ufffd"' in (tmp_path / prometheus.FILE).read_text(encoding="utf-8")


def test_9_a_hostname_that_is_not_utf8_keeps_a_passing_preflight_passing(tmp_path, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "node\udcff7")
    p = run_cli(*CHEAP, "--prometheus-textfile", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert 'Hostname="node\ufffd7"' in (tmp_path / prometheus.FILE).read_text(encoding="utf-8")


def test_9_a_huge_existing_file_is_replaced_not_merged(tmp_path):
    """Merging an existing 105 MB ddpdoctor.prom ran unbounded: past the cap it is replaced."""
    line = 'ddpdoctor_run_status{Hostname="h",command="nccl-bench",hpc_job="%d"} 0.0\n'
    body = "# HELP ddpdoctor_run_status x\n# TYPE ddpdoctor_run_status gauge\n"
    body += "".join(line % i for i in range(100_000))  # ~7 MB
    (tmp_path / prometheus.FILE).write_text(body)
    doc = {"kind": "preflight", "verdict": "pass", "created": "2026-11-28T10:00:00+00:00"}
    t0 = time.process_time()
    prometheus.write(tmp_path, prometheus.samples(doc, command="preflight", hostname="h"), "preflight")
    assert time.process_time() - t0 < 2.0
    text = (tmp_path / prometheus.FILE).read_text()
    assert 'command="preflight"' in text and 'command="nccl-bench"' not in text


@pytest.mark.parametrize("value", ["", "a" * 5000], ids=["empty", "5000-chars"])
def test_9_a_textfile_dir_empty_or_too_long_is_a_usage_error(value):
    p = run_cli(*CHEAP, "--prometheus-textfile", value)
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and len(p.stderr) < 400, p.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv,code", [((), 0), (("--only", "nosuch"), 2)])
def test_9_npd_with_stdout_on_a_full_device_exits_with_an_npd_code(argv, code):
    """stdout on /dev/full: the monitor still gets 0 OK / 2 Unknown (before: exit 120, a traceback)."""
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--only", "env-vars", "--no-save",
                            "--exit-codes", "npd", *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=90)
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr
