"""Round 7 (issue 55 item 6) of the unattended node check: the job ids SLURM never gives, kept facts that are not
a file or too deep to parse, a umask 000, a cross_node_key that is a folder, a check name no UTF-8 can hold."""
from __future__ import annotations

import json
import os
import stat

import pytest

from ddpdoctor.report import prometheus
from ddpdoctor.unattended import kept
from ddpdoctor.unattended import node_check as nc
from tests.unit.helpers import run_cli

FAILING = 'only = ["resources"]\n[checks.resources]\nmin_shm_mib = 1000000000\nfail_shm_mib = 1000000000\n'


@pytest.mark.parametrize("job", ["4242,5000", "4242 5000", "\u00b2\u00b3", "4242\n5000", "-1"])
def test_6_a_job_id_slurm_never_gives_touches_no_job(slurm_idle, job):
    cfg, calls = slurm_idle
    cfg.write_text(cfg.read_text() + FAILING)
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1",
                                   "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": job})
    assert calls.read_text() == "", "commented or requeued a job the id does not name alone"
    assert p.returncode == 2 and "is not one job's id" in p.stderr, p.stdout + p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("shape", ["folder", "deep"])
def test_6_kept_facts_that_are_a_folder_or_too_deep_are_no_facts(slurm_idle, shape):
    """Before: the prolog's checks ended with exit 4 (a failing node let through); now the file is refused like
    any bad one and the prolog decides on what it measured."""
    cfg, calls = slurm_idle
    results = cfg.parent / "results"
    path = kept.path_of(str(results), "n1", kept.fingerprint())
    path.parent.mkdir(parents=True)
    if shape == "folder":
        path.mkdir()
    else:
        path.write_text("[" * 50_000 + "]" * 50_000)
    cfg.write_text(cfg.read_text() + FAILING)
    p = run_cli("node-check", "--json", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1",
                                             "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "9"})
    assert p.returncode == 1, p.stdout + p.stderr  # the failing node still fails its job
    doc = json.loads(p.stdout)
    note = doc["node_check"]["kept_facts_note"]
    assert ("refused" in note) if shape == "folder" else ("do not parse" in note), note
    assert doc["node_check"]["action"] == "drain"


def test_6_under_umask_000_each_folder_made_is_0755(tmp_path):
    """Before: /var/lib/ddpdoctor made 0777 under umask 000, and then every record refused as root."""
    results = tmp_path / "var" / "lib" / "ddpdoctor" / "node-check"
    old = os.umask(0)
    try:
        written = nc.keep({"schema": "ddpdoctor"}, results / "n1" / "20990101-x.json", keep_n=5)
        kept.save(str(results), "n1", "fp", {"torch-build": {"torch": "2.13"}}, "t")
        again = nc.keep({"schema": "ddpdoctor"}, results / "n1" / "20990102-x.json", keep_n=5)
    finally:
        os.umask(old)
    for folder in (tmp_path / "var", tmp_path / "var" / "lib", results.parent, results, results / "n1",
                   results / "n1" / kept.FOLDER):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755, folder
    assert written.exists() and again.exists()
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o644
    assert kept.load(str(results), "n1", "fp")[0]["facts"] == {"torch-build": {"torch": "2.13"}}


def test_6_a_cross_node_key_that_is_a_folder_is_said_not_timed_out(slurm_idle):
    cfg, _ = slurm_idle
    key = cfg.parent / "key-folder"
    key.mkdir(mode=0o700)
    cfg.write_text(cfg.read_text().replace("[node-check]\n", f'[node-check]\ncross_node = true\n'
                                           f'cross_node_key = "{key}"\nonly = ["env-vars"]\n'))
    p = run_cli("node-check", "--json", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1",
                                             "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "9",
                                             "SLURM_JOB_NODELIST": "n[1-2]"})
    assert "Traceback" not in p.stderr, p.stderr
    record = json.loads(p.stdout)["node_check"]["cross_node"]
    assert "did not end in time" not in record["skipped"] and str(key) in record["skipped"], record


def test_6_a_check_name_with_a_lone_surrogate_is_written_to_prometheus(tmp_path):
    doc = {"kind": "preflight", "verdict": "pass", "created": "2026-11-28T10:00:00+00:00", "nodes": {"h": {}},
           "results": [{"check": "odd\udcff", "level": "pass", "summary": "ok", "nodes": ["h"]}]}
    prometheus.write(tmp_path, prometheus.samples(doc, command="preflight", hostname="h"), "preflight")
    assert 'check="odd\ufffd"' in (tmp_path / prometheus.FILE).read_text(encoding="utf-8")
