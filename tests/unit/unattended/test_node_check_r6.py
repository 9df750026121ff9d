"""Round 6 (issue 47) of the unattended node check: what must never drain a node (a plugin an upgrade broke) and
the node names SLURM can never give."""
from __future__ import annotations

import json
from importlib import metadata

import pytest

from ddpdoctor import registry
from tests.unit.helpers import run_cli


def test_6_a_plugin_that_fails_to_import_never_drains_the_node(slurm_idle, monkeypatch, tmp_path):
    """An upgrade broke one plugin on every node: a prolog says so in its record and drains nothing."""
    cfg, calls = slurm_idle
    cfg.write_text(cfg.read_text() + 'only = ["env-vars", "site-plugin"]\n')
    broken = metadata.EntryPoint("site-plugin", "ddpdoctor_site_plugin_gone_after_upgrade:Check", registry.GROUP)
    real = metadata.entry_points

    def with_broken(**kw):
        found = real(**kw)
        return [*found, broken] if kw.get("group") == registry.GROUP else found

    monkeypatch.setattr(registry.metadata, "entry_points", with_broken)
    p = run_cli("node-check", "--json", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1",
                                             "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "4"})
    doc = json.loads(p.stdout)
    (bad,) = [r for r in doc["results"] if r["check"] == "site-plugin"]
    assert bad["level"] == "fail" and "failed to load" in bad["summary"] and bad["details"]["tool_error"]
    assert doc["node_check"]["action"] == "none", doc["node_check"]
    assert p.returncode == 0 and calls.read_text() == ""


@pytest.mark.parametrize("name", ["n[1-3]", "n1,n2", "n1 n2", "n1\nn2", "-n1", "n1\x1b[2J"])
def test_9_a_node_name_slurm_never_gives_is_refused(slurm_idle, name):
    cfg, calls = slurm_idle
    cfg.write_text(cfg.read_text() + 'only = ["resources"]\n[checks.resources]\nmin_shm_mib = 1000000000\n'
                   'fail_shm_mib = 1000000000\n')
    env = {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": name, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
           "SLURM_JOB_ID": "4"}
    p = run_cli("node-check", env=env)
    assert calls.read_text() == "", "drained every node the name expands to"
    assert p.returncode == 2 and "is not one node's name" in p.stderr, p.stdout + p.stderr
    assert "\x1b" not in p.stderr
