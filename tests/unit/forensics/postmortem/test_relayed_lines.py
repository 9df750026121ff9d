"""Issue 53 item 5: torchrun without --redirects (torchelastic's default log dir holds no rank's log) relays every
rank's output on its own stderr, `[rank1]: RuntimeError: ...`, beside its failure table: what srun's output file
holds. postmortem read none of it: rank 1's crash had "no cause in its records", and where torchrun's table named
rank 0 first, rank 0 (no cause either) was the root cause. The texts are torch 2.13's, from a real run."""
from __future__ import annotations

import json

from tests.unit.helpers import run_cli

RELAYED = """W1202 18:56:53.273000 992 torch/distributed/run.py:874] *****************************************
[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/crash/crash.py", line 7, in <module>
[rank1]:     raise RuntimeError("boom on rank 1")
[rank1]: RuntimeError: boom on rank 1
[rank0]: Traceback (most recent call last):
[rank0]:   File "/tmp/crash/crash.py", line 8, in <module>
[rank0]:     dist.all_reduce(torch.ones(4))
[rank0]:   File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
[rank0]:     work.wait()
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by \
peer [127.0.0.1]:48023. This is typically caused by a remote worker crashing.
W1202 18:56:54.901000 992 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 997 closing signal SIGTERM
"""
RECORD = """[{i}]:
  time      : 2026-12-02_18:56:54
  host      : localhost
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 99{rank}) {sig}
  error_file: <N/A>
  traceback : {tb}
"""
TABLE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
crash.py FAILED
------------------------------------------------------------
Failures:
{others}------------------------------------------------------------
Root Cause (first observed failure):
{first}============================================================
"""
TB = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def torchelastic_dir(tmp_path):
    """torchelastic's default folder: error files only (none without @record), no stdout/stderr logs."""
    attempt = tmp_path / "torchelastic_xoq8l6dj" / "5af86389-ab14-4c33-af37-b9d6fc739cb7_8ptm1cgf" / "attempt_0"
    for local in (0, 1):
        (attempt / str(local)).mkdir(parents=True, exist_ok=True)
    return attempt.parent.parent


def postmortem(tmp_path, agent_text: str) -> dict:
    (tmp_path / "srun.out").write_text(agent_text)
    p = run_cli("postmortem", str(torchelastic_dir(tmp_path)), "--agent-log", str(tmp_path / "srun.out"), "--json",
                "--no-save")
    assert p.returncode == 1, p.stderr
    return json.loads(p.stdout)


def test_the_crashed_rank_s_relayed_traceback_is_its_cause(tmp_path):
    table = TABLE.format(others=RECORD.format(i=1, rank=0, code=-15, sig="(SIGTERM)",
                                              tb="Signal 15 (SIGTERM) received by PID 990"),
                         first=RECORD.format(i=0, rank=1, code=1, sig="", tb=TB))
    doc = postmortem(tmp_path, RELAYED + table)
    root = doc["root_cause"]
    assert (root["rank"], root["category"], root["error_type"]) == (1, "exception", "RuntimeError"), root
    assert root["location"].endswith("crash.py:7") and doc["culprit_ranks"] == [1]
    assert [c["rank"] for c in doc["consequences"]] == [0]


def test_a_rank_without_a_cause_is_never_the_root_cause_over_one_whose_error_the_logs_hold(tmp_path):
    """torchrun's table lists rank 0 as the first observed failure (exit 1), rank 1 after it; rank 0's own lines
    say only that its peer was lost; rank 1's hold its RuntimeError."""
    table = TABLE.format(others=RECORD.format(i=1, rank=1, code=1, sig="", tb=TB),
                         first=RECORD.format(i=0, rank=0, code=1, sig="", tb=TB))
    doc = postmortem(tmp_path, RELAYED + table)
    assert doc["root_cause"]["rank"] == 1 and doc["culprit_ranks"] == [1], doc["root_cause"]
    quiet = "\n".join(line for line in RELAYED.splitlines() if not line.startswith("[rank0]"))
    doc = postmortem(tmp_path, quiet + "\n" + table)  # rank 0 with no line at all: no cause, rank 1's still wins
    assert doc["root_cause"]["rank"] == 1 and doc["culprit_ranks"] == [1], doc["root_cause"]
