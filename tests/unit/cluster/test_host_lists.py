"""Host lists from the launcher are bounded input (issue 20): an unparsable or unbounded SLURM_JOB_NODELIST, a
PBS node file of a million hosts or a huge --hosts file is one line naming the variable or file, exit 2, at
once: nothing is expanded or read beyond the bounds (inputs.MAX_NODES hosts)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ddpdoctor.cluster import launcher_env as le
from ddpdoctor.errors import UsageError
from ddpdoctor.inputs import MAX_NODES


@pytest.mark.parametrize("text, needle", [
    ("node[1-99999999]", f"names more than {MAX_NODES} hosts"),
    ("x[1-200][1-200]", f"names more than {MAX_NODES} hosts"),  # counted as a product, before expanding
    (",".join(f"a{i}" for i in range(MAX_NODES + 1)), f"names more than {MAX_NODES} hosts"),
    ("n[0-16384]", f"names more than {MAX_NODES} hosts"),
    ("n[1-", "a '[' without its ']'"),
    ("n]", "a ']' without its '['"),
    ("n[[1]]", "a bracket inside a bracket"),
    ("n[a-b]", "is not a number"),
    ("n[5-2]", "runs backwards"),
    ("n[1-" + "9" * 5000 + "]", "is not a number"),
    ("a b", "' ' cannot be in a host name"),
    ("x" * (le.MAX_LIST_CHARS + 1), "longer than"),
])
def test_bad_slurm_nodelists_are_one_usage_error_naming_the_variable(text, needle):
    start = time.process_time()  # CPU time: another job's load does not inflate it
    with pytest.raises(UsageError) as err:
        le.expand_slurm_nodelist(text)
    assert str(err.value).startswith("SLURM_JOB_NODELIST=") and needle in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400  # the value is shown cut, not whole
    assert time.process_time() - start < 2.0


def test_the_bound_itself_and_ordinary_lists_expand():
    assert len(le.expand_slurm_nodelist(f"n[1-{MAX_NODES}]")) == MAX_NODES
    assert le.expand_slurm_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert le.expand_slurm_nodelist("rack[1-2]-node[01-02]") == ["rack1-node01", "rack1-node02", "rack2-node01",
                                                                   "rack2-node02"]
    assert le.expand_slurm_nodelist("a,,b, c") == ["a", "b", "c"]


def test_a_pbs_node_file_repeats_hosts_per_slot_and_is_bounded_in_hosts():
    slots = "".join(f"node{i:04d}\n" for i in range(8000)) * 128  # 8000 nodes x 128 slots: a million lines
    start = time.process_time()  # CPU time: another job's load does not inflate it
    info = le.from_env({"PBS_NODEFILE": "/f"}, read_file=lambda p: slots, hostname="node0002")
    assert info.nnodes == 8000 and info.node_rank == 2 and time.process_time() - start < 5
    distinct = "".join(f"n{i}\n" for i in range(1_000_000))
    with pytest.raises(UsageError, match=f"PBS_NODEFILE /f: more than {MAX_NODES} distinct hosts"):
        le.from_env({"PBS_NODEFILE": "/f"}, read_file=lambda p: distinct, hostname="n1")


def test_node_files_are_read_with_a_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(le, "MAX_NODE_FILE_BYTES", 1024)
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_text("a\nb\n")
    big.write_text("h\n" * 2000)
    assert le.read_node_file(str(small)) == "a\nb\n"
    with pytest.raises(UsageError, match=f"{big}: larger than"):
        le.read_node_file(str(big))
    with pytest.raises(OSError):
        le.read_node_file(str(tmp_path / "absent"))


def _preflight(*args, env):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", *args], capture_output=True, text=True,
                          timeout=60, env={**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))},
                                           **env})


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.timeout(120)
def test_the_cli_says_which_variable_or_file_in_one_line(tmp_path):
    bad = {"SLURM_JOB_NODELIST": "node[1-99999999]", "SLURM_NODEID": "0", "SLURM_NNODES": "2"}
    for args in ((), ("--master", "127.0.0.1:1", "--nnodes", "2")):  # found by the launcher, or with flags
        p = _preflight(*args, env=bad)
        assert p.returncode == 2 and "SLURM_JOB_NODELIST='node[1-99999999]'" in _one_line(p.stderr), p.stderr
    many = tmp_path / "nodefile"
    many.write_text("".join(f"n{i}\n" for i in range(MAX_NODES + 5)))
    p = _preflight(env={"PBS_NODEFILE": str(many), "PBS_JOBID": "1"})
    assert p.returncode == 2 and f"PBS_NODEFILE {many}: more than" in _one_line(p.stderr)
    p = _preflight("--hosts", f"@{many}", env={})
    assert p.returncode == 2 and f"--hosts @{many}: more than" in _one_line(p.stderr)
    p = _preflight(env={"SLURM_NODEID": "0", "SLURM_NNODES": "99999999", "SLURM_JOB_NODELIST": "a"})
    assert p.returncode == 2 and "node count from the slurm environment 99999999" in _one_line(p.stderr), p.stderr
