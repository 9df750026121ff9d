"""README's launcher one-liners carry the per-job token to every node (issue 25 item 1). Open MPI's mpiexec
starts remote ranks through ssh, whose login has a fresh environment: a DDPDOCTOR_TOKEN exported in the job
script reaches them only with ``-x DDPDOCTOR_TOKEN`` (the line used to say mpiexec passes it on by itself;
the remote nodes then ran without the token the master had)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"


def launcher_lines() -> list[str]:
    block = README.read_text().split("export DDPDOCTOR_TOKEN=", 1)[1].split("```", 1)[0]
    return [ln for ln in block.splitlines()[1:] if ln.strip()]


def test_every_launcher_line_after_the_token_passes_it_on():
    lines = launcher_lines()
    assert any(ln.startswith("srun ") for ln in lines) and any(ln.startswith("mpiexec ") for ln in lines), lines
    for line in lines:
        if line.startswith("mpiexec "):
            assert "-x DDPDOCTOR_TOKEN" in line, line
        elif line.startswith(("ssh", "for ", "pbsdsh")):
            assert "DDPDOCTOR_TOKEN=$DDPDOCTOR_TOKEN" in line, line


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs Open MPI's mpiexec")
def test_readmes_mpiexec_options_carry_the_token_to_a_remote_login(tmp_path):
    """The README line's options, run through an rsh agent that gives the 'remote' rank a fresh environment
    (as ssh does): the token arrives; without -x it does not."""
    agent = tmp_path / "rsh"
    agent.write_text('#!/bin/sh\nshift\nexec env -i PATH="$PATH" HOME="$HOME" sh -c "$*"\n')
    agent.chmod(0o755)
    line = next(ln for ln in launcher_lines() if ln.startswith("mpiexec "))
    passes = re.findall(r"-x \S+", line)
    env = dict(os.environ, DDPDOCTOR_TOKEN="tok-of-this-job")

    def remote_token(options: list[str]) -> str:
        p = subprocess.run(["mpiexec", "--allow-run-as-root", "--host", "127.0.0.2", "-np", "1", "--mca",
                            "plm_rsh_agent", str(agent), *options, "sh", "-c", 'echo "token=[$DDPDOCTOR_TOKEN]"'],
                           capture_output=True, text=True, timeout=50, env=env)
        return re.search(r"token=\[(.*)\]", p.stdout + p.stderr).group(1)

    assert remote_token([]) == ""  # what a node got from the line as it was
    assert remote_token(" ".join(passes).split()) == "tok-of-this-job"
