"""Forensics when the user's own process-group timeout is short (10 s, `init_process_group("gloo", timeout=...)`)
and fires before any hang threshold: 3 and 4 real ranks (CPU, gloo), each fault class, under run-trainer with
default settings (live) and under plain torchrun read by `ddpdoctor postmortem` (dumps after the timeout, and
no dump at all). The job is tests/integration/fr_job.py; the rank that waited is never the root cause."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.fr_job import JOB, LINE
from tests.integration.test_trainer import run_bounded, run_trainer, two_nodes

pytestmark = pytest.mark.slow
PG_TIMEOUT = 10
# run.json is written once the job has ended after the evidence: under a loaded 2-core CI that took up to 5.8 s
# past the timeout on one node, so the bound there is the timeout + 10 s, and 11.9 s with two nodes (4 ranks, two
# torchruns, an exchange), bound at the timeout + 25 s (issue 32: no bound tighter than 3x quiet); that the
# evidence came before the timeout is asserted on its own age


@pytest.fixture
def job(tmp_path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


def env(culprits, stall: Path, **extra) -> dict:
    return {"CULPRITS": ",".join(map(str, culprits)), "PG_TIMEOUT": str(PG_TIMEOUT), "STALL_FILE": str(stall),
            "OMP_NUM_THREADS": "1", **extra}


def live(tmp_path, job, nproc, mode, culprits):
    stall = tmp_path / "stall"
    p, doc = run_trainer("--nproc-per-node", str(nproc), "--", str(job), mode, run_dir=tmp_path / "run",
                         timeout=110, env=env(culprits, stall))
    assert doc is not None, p.stderr[-3000:]
    run_json = next((tmp_path / "run").glob("*/run.json"))
    waited = run_json.stat().st_mtime - float(stall.read_text().split()[0])
    assert not [c for c in psutil.Process().children(recursive=True) if "job.py" in " ".join(c.cmdline())]
    return p, doc, waited


def plain(tmp_path, job, nproc, mode, culprits) -> tuple[Path, Path, Path]:
    """The job under plain torchrun, arranging flight-recorder dumps as a user would: (logs, agent log, dumps)."""
    logs, dumps = tmp_path / "logs", tmp_path / "dumps"
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = run_bounded([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--redirects", "3",
                     "--log-dir", str(logs), "--monitor-interval", "0.5", str(job), mode], 100,
                    env=env(culprits, tmp_path / "stall", FR_DUMPS=str(dumps), TORCH_FR_BUFFER_SIZE="200"))
    assert p.returncode != 0
    agent = tmp_path / "torchrun.stderr"
    agent.write_text(p.stderr)
    return logs, agent, dumps


def postmortem(*args) -> dict:
    p = run_bounded([sys.executable, "-m", "ddpdoctor", "postmortem", "--json", *map(str, args)], 60)
    assert p.returncode == 1, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.timeout(180)
def test_live_verdict_before_the_users_timeout_3_ranks(tmp_path, job):
    """Rank 1 sleeps in data loading; gloo would time rank 0 out at 10 s, before the calibrated threshold (30 s):
    the evidence is taken before that, and the verdict names rank 1 with file:line."""
    p, doc, waited = live(tmp_path, job, 3, "sleep", [1])
    v = doc["hang"]["verdict"]
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [1], v
    assert v["culprits"][0]["where"] == f"{job}:{LINE['sleep']}" and v["culprits"][0]["function"] == "get_batch"
    assert doc["hang"]["threshold"]["source"] == "process-group timeout" and doc["hang"]["threshold"]["seconds"] == 10
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["category"] == "hang" and doc["culprit_ranks"] == [1]
    assert sorted(c["rank"] for c in doc["consequences"]) == [0, 2]
    assert waited < PG_TIMEOUT + 10, waited
    # The job is stopped after its own timeout: torchrun's reaction to that stop is in its log, not on the terminal.
    for noise in ("SignalException", "got signal"):
        assert noise not in p.stderr, p.stderr[-3000:]


@pytest.mark.timeout(180)
def test_live_two_culprits_4_ranks(tmp_path, job):
    p, doc, waited = live(tmp_path, job, 4, "sleep", [1, 2])
    v = doc["hang"]["verdict"]
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [1, 2], v
    assert doc["culprit_ranks"] == [1, 2] and sorted(c["rank"] for c in doc["consequences"]) == [0, 3]
    assert waited < PG_TIMEOUT + 10, waited


@pytest.mark.timeout(180)
def test_live_rank_guarded_barrier_by_majority_3_ranks(tmp_path, job):
    """Rank 0 alone in a barrier, ranks 1 and 2 in DDP's all_reduce: the majority names rank 0, and each waiting
    rank's own op is named (all_reduce, not the culprit's barrier)."""
    p, doc, waited = live(tmp_path, job, 3, "barrier", [0])
    v = doc["hang"]["verdict"]
    assert v["class"] == "desync" and [c["rank"] for c in v["culprits"]] == [0] and not v.get("no_majority"), v
    assert v["collective"]["calls"]["0"]["op"] == "barrier" and v["collective"]["op"] == "all_reduce"
    assert all("all_reduce" in c["reason"] for c in doc["consequences"]), doc["consequences"]
    assert 0 not in [c["rank"] for c in doc["consequences"]]  # not its own consequence
    assert waited < PG_TIMEOUT + 10, waited


@pytest.mark.timeout(180)
def test_dtype_mismatch_4_ranks_names_the_odd_rank_not_the_aborted_one(tmp_path, job):
    """Rank 2 all_reduces float64: gloo aborts a healthy rank ("collective mismatch"); the ranks' flight records
    (written at exit, and on the launcher's SIGTERM) name rank 2 by majority."""
    p, doc, _ = live(tmp_path, job, 4, "dtype", [2])
    assert doc["culprit_ranks"] == [2] and doc["root_cause"]["error_type"] == "desync", doc["root_cause"]
    aborted = [c for c in doc["consequences"] if c.get("signal") == "SIGABRT"]
    assert aborted and aborted[0]["rank"] != 2 and "detected the mismatch" in aborted[0]["reason"]
    assert doc["root_cause"]["location"] == f"{job}:{LINE['metric']}"


@pytest.mark.timeout(180)
def test_postmortem_of_a_plain_job_after_its_timeout_3_ranks(tmp_path, job):
    """Plain torchrun: dumps written as the ranks ended (gloo counted the timed-out all_reduce as completed) name
    rank 1 by its last sequence id; the log dir alone names it as the likely culprit, saying why."""
    logs, agent, dumps = plain(tmp_path, job, 3, "sleep", [1])
    doc = postmortem(logs, "--agent-log", agent, "--fr-dir", dumps / "after")
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["error_type"] == "missing_rank" and doc["culprit_ranks"] == [1], rc
    # issue 30: its last completed collective is not where it stands; without a stack no location is given,
    # the message says where it was last seen
    assert rc["location"] is None and f"{job}:{LINE['metric']}" in rc["message"]
    assert sorted(c["rank"] for c in doc["consequences"]) == [0, 2]
    assert all(c["victim"] and "waited" in c["reason"] for c in doc["consequences"])
    bare = postmortem(logs, "--agent-log", agent)  # no dump at all
    assert bare["root_cause"]["rank"] == 1 and bare["root_cause"]["message"].startswith("likely rank 1")
    assert "without ever timing out" in bare["root_cause"]["message"] and bare["culprit_ranks"] == [1]
    fix = bare["consequences"][0]["fix"] + bare["root_cause"]["fix"]
    assert "--hang-timeout 300" not in fix and "--hang-timeout 5" in bare["root_cause"]["fix"]
    human = run_bounded([sys.executable, "-m", "ddpdoctor", "postmortem", str(logs), "--agent-log", str(agent)], 60)
    assert "postmortem: FAIL" in human.stdout and "saved in run.json" not in human.stdout


@pytest.mark.timeout(180)
def test_postmortem_barrier_on_4_ranks(tmp_path, job):
    logs, agent, dumps = plain(tmp_path / "b", job, 4, "barrier", [0])
    for doc in (postmortem(logs, "--agent-log", agent, "--fr-dir", dumps / "after"), postmortem(logs, "--agent-log", agent)):
        assert doc["culprit_ranks"] == [0], doc["root_cause"]
        # the culprit is not its own consequence, and no rankless guess of the logs is kept as one
        assert sorted(c["rank"] for c in doc["consequences"]) == [1, 2, 3], doc["consequences"]


@pytest.mark.timeout(180)
def test_postmortem_shape_on_4_ranks(tmp_path, job):
    logs, agent, dumps = plain(tmp_path / "s", job, 4, "shape", [1])
    doc = postmortem(logs, "--agent-log", agent, "--fr-dir", dumps / "after")
    # The odd rank (8 elements) is the one gloo aborted here: it left no record, the three that did agree.
    rc = doc["root_cause"]
    assert doc["culprit_ranks"] == [1] and rc["rank"] == 1 and rc["category"] == "desync", rc
    assert "likely the odd call" in rc["reason"]


@pytest.mark.timeout(180)
def test_rank_frozen_inside_a_collective_3_ranks(tmp_path, job):
    p, doc, waited = live(tmp_path, job, 3, "stuck", [2])
    v = doc["hang"]["verdict"]
    assert v["class"] == "process_stopped" and [c["rank"] for c in v["culprits"]] == [2], v
    assert waited < PG_TIMEOUT + 10 + 5, waited  # the stopped rank is continued, then stopped


@pytest.mark.timeout(180)
def test_a_rank_late_but_before_the_users_timeout_is_no_alarm(tmp_path, job):
    """Rank 1 spends 7 s in data loading once, under the user's 10 s timeout: the evidence taken 5 s before the
    timeout is dropped when the collective completes, the job goes on and passes (slow but legal)."""
    stall = tmp_path / "stall"
    p, doc = run_trainer("--nproc-per-node", "3", "--", str(job), "sleep", run_dir=tmp_path / "run", timeout=110,
                         env=env([1], stall, SLEEP_S="7", STEPS="12"))
    assert p.returncode == 0 and doc["verdict"] == "pass" and doc["hang"] is None, p.stdout[-3000:]
    assert stall.exists()  # the slow step did happen


SLOW_TEARDOWN = """\
import datetime, os, time, torch, torch.distributed as dist


class Library:
    def __del__(self):
        time.sleep(12)  # a library's teardown at interpreter exit, after atexit (the rank's server is gone)


KEEP = Library()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, t = dist.get_rank(), torch.ones(8)
for step in range(6):
    if rank == 0 and step == 5:
        time.sleep(3)  # late to the last collective: the others' polls see it in flight
    dist.all_reduce(t)
dist.destroy_process_group()
"""


@pytest.mark.timeout(180)
def test_a_finished_job_slow_to_tear_down_is_no_alarm(tmp_path):
    """Every rank finished its last collective, then spends 12 s tearing down (past the 10 s timeout of a
    collective a poll last saw in flight): the job passes; the ranks' exit records say nothing is pending."""
    script = tmp_path / "teardown.py"
    script.write_text(SLOW_TEARDOWN)
    p, doc = run_trainer("--nproc-per-node", "3", "--", str(script), run_dir=tmp_path / "run", timeout=110,
                         env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0 and doc["verdict"] == "pass" and doc["hang"] is None, p.stdout[-3000:]


@pytest.mark.timeout(180)
def test_healthy_run_with_a_short_timeout_is_no_alarm(tmp_path, job):
    p, doc, _ = live(tmp_path, job, 3, "healthy", [])
    assert p.returncode == 0 and doc["verdict"] == "pass" and doc["hang"] is None, p.stderr[-2000:]
    assert os.path.isdir(tmp_path / "run")


@pytest.mark.timeout(300)
def test_two_nodes_name_the_culprit_before_the_users_timeout(tmp_path, job, monkeypatch):
    """2 nodes x 2 ranks, rank 3 (node 1) sleeps in data loading, default settings: node 1's only other rank
    waits, node 0's two wait; the user's 10 s timeout arms both watchdogs, they swap evidence through the shared
    run dir, and both name rank 3 with file:line from evidence taken before the timeout expired."""
    stall = tmp_path / "stall"
    for key, value in env([3], stall).items():
        monkeypatch.setenv(key, value)
    res = two_nodes(tmp_path / "run", str(job), "sleep")
    for code, out, err in res:
        doc = json.loads(out)
        v = doc["hang"]["verdict"]
        assert code == 1 and v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [3], err[-2000:]
        assert v["culprits"][0]["where"] == f"{job}:{LINE['sleep']}" and v["missing_nodes"] == 0, v
        assert doc["hang"]["threshold"]["source"] == "process-group timeout" and doc["culprit_ranks"] == [3]
        assert sorted(c["rank"] for c in doc["consequences"]) == [0, 1, 2], doc["consequences"]
        # the evidence that names rank 3 was taken before the user's timeout expired ...
        assert doc["hang"]["stalled_s"] < PG_TIMEOUT, doc["hang"]["stalled_s"]
        # ... and the verdict written soon after it: 1.6-1.8 s past it here quiet and with four busy loops, 11.9 s
        # on a loaded 2-core CI (both nodes' torchruns tear down 4 ranks' tracebacks, then swap their evidence)
        ended = Path(doc["run_json"]).stat().st_mtime - float(stall.read_text().split()[0])
        assert ended < PG_TIMEOUT + 25, ended


PAIRS = '''\
import datetime, os, time
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ["PG_TIMEOUT"])))
rank = dist.get_rank()
pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
for step in range(30):
    t = torch.ones(8)
    if step == 5 and rank == 3:
        open(os.environ["STALL_FILE"], "w").write(f"{time.time()}\\n")
        time.sleep(300)  # rank 3 stuck in its own code
    dist.all_reduce(t, group=pairs[rank // 2])  # within the pair
    dist.all_reduce(t)  # the whole job
    time.sleep(0.1)
dist.destroy_process_group()
'''


@pytest.mark.timeout(180)
def test_subgroups_the_rank_waiting_in_its_pair_is_no_culprit_4_ranks(tmp_path):
    """Two pair groups and the world group: rank 3 sleeps, rank 2 waits in their pair's all_reduce, ranks 0-1
    in the world's. pg_id 1 is a different group on ranks 0-1 and 2-3; rank 2 was blamed with rank 3."""
    script = tmp_path / "pairs.py"
    script.write_text(PAIRS)
    p, doc, waited = live(tmp_path, script, 4, "pairs", [3])
    v = doc["hang"]["verdict"]
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [3], v["summary"]
    assert v["culprits"][0]["where"] == f"{script}:11" and v["collective"]["pg"] == "2"
    assert doc["culprit_ranks"] == [3] and sorted(c["rank"] for c in doc["consequences"]) == [0, 1, 2]
    assert "no_evidence" not in v and waited < PG_TIMEOUT + 10, waited
