"""Fixtures of the unattended node check's unit tests: a stand-in scontrol for the node check to drive."""
from __future__ import annotations

import pytest


@pytest.fixture
def slurm_idle(tmp_path):
    """A stand-in scontrol: the node idle; every `update` and `requeue` recorded. (site config, calls file)"""
    calls = tmp_path / "calls.txt"
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\nif [ \"$1\" = show ]; then echo \"NodeName=$4 State=IDLE Reason=(null)\"; exit 0; "
                      f"fi\nprintf '%s|' \"$@\" >> {calls}\n")
    script.chmod(0o755)
    calls.write_text("")
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{tmp_path / "results"}"\nscontrol = "{script}"\n')
    return cfg, calls
