"""Issue 45, found under a real SLURM: `srun -N3 torchrun --nproc-per-node 1 --log-dir DIR` with DIR shared, one rank
killed with SIGKILL from outside. Each node's torchrun makes its own `<rdzv id>_<random>` folder in DIR; postmortem
read only the newest and took every table record's logs from it, so srun's merged output (every node's failure
table) named rank 0, which only lost its peer, with rank 0's logs read from the killed rank's folder. Now the job's
folders are read together (postmortem/node_folders.py), and with run-trainer each other node's own table is read
too (node_summary). The layouts and texts below are the real run's (tests/integration/test_slurm.py)."""
from __future__ import annotations

import json
import os

from ddpdoctor.forensics.judge import attribution
from ddpdoctor.forensics.postmortem import analysis, node_folders
from tests.unit.helpers import run_cli

PEER_LOST = """[W1129 01:21:52.323801498 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved.
[rank{r}]: Traceback (most recent call last):
[rank{r}]:   File "/job/attach_job.py", line 119, in main
[rank{r}]:     dist.all_reduce(t)
[rank{r}]:   File "/venv/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
[rank{r}]:     work.wait()
[rank{r}]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by \
peer [198.18.0.2]:37075. This is typically caused by a remote worker crashing.
"""
TABLE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=====================================================
/job/attach_job.py FAILED
-----------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
-----------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_01:21:5{s}
  host      : node{n}
  rank      : {r} (local_rank: 0)
  exitcode  : {code} (pid: 576{r})  {sig}
  error_file: <N/A>
  traceback : {tb}
=====================================================
"""


def table(rank: int, code: int) -> str:
    killed = code == -9
    return TABLE.format(s=3 if killed else 4, n=rank + 1, r=rank, code=code, sig="(SIGKILL)" if killed else "",
                        tb="Signal 9 (SIGKILL) received by PID 5761" if killed else "To enable traceback see: ...")


def shared_log_dir(tmp_path, names=("none_1nw9aurb", "none__uubosbl", "none_29a41nqb")):
    """Three nodes' folders, one rank each; rank 1 (node2) killed: an empty log. Its folder is the newest (mtime)
    and its random suffix holds an "_", as torch's mkdtemp may make it."""
    logs = tmp_path / "logs"
    for i, (rank, name) in enumerate(zip((0, 1, 2), names)):
        rank_dir = logs / name / "attempt_0" / "0"
        rank_dir.mkdir(parents=True)
        (rank_dir / "stderr.log").write_text("" if rank == 1 else PEER_LOST.format(r=rank))
        (rank_dir / "stdout.log").write_text("")
        for d in (rank_dir.parent, rank_dir.parent.parent):
            os.utime(d, (1000 + i * 0.001 + (1 if rank == 1 else 0), 1000 + i * 0.001 + (1 if rank == 1 else 0)))
    return logs


def postmortem(logs, *args) -> tuple[int, dict]:
    p = run_cli("postmortem", str(logs), *map(str, args), "--json", "--no-save")
    return p.returncode, json.loads(p.stdout)


def test_srun_s_merged_output_names_the_killed_rank_and_its_signal_not_a_rank_that_lost_its_peer(tmp_path):
    logs = shared_log_dir(tmp_path)
    merged = tmp_path / "job.err"
    merged.write_text(table(1, -9) + table(0, 1) + table(2, 1))
    code, doc = postmortem(logs, "--agent-log", merged)
    rc = doc["root_cause"]
    assert code == 1 and (rc["rank"], rc["host"], rc["signal"]) == (1, "node2", "SIGKILL"), rc
    assert doc["culprit_ranks"] == [1]
    assert sorted((c["rank"], c["category"]) for c in doc["consequences"]) == [(0, "peer_lost"), (2, "peer_lost")]


def test_the_log_dir_alone_names_the_rank_that_left_no_record_as_likely_never_one_that_waited(tmp_path):
    code, doc = postmortem(shared_log_dir(tmp_path))
    rc = doc["root_cause"]
    assert code == 1 and rc["rank"] == 1 and rc["error_type"] == "likely_ended_early", rc
    assert "--agent-log" in rc["message"] and doc["culprit_ranks"] == [1]


def test_one_node_s_own_table_reads_the_others_folders_for_their_ranks(tmp_path):
    """A node's srun --error file: its table alone; the ranks it does not list come from the other folders."""
    logs = shared_log_dir(tmp_path)
    agent = tmp_path / "task-1.err"
    agent.write_text(table(1, -9))
    code, doc = postmortem(logs, "--agent-log", agent)
    rc = doc["root_cause"]
    assert code == 1 and (rc["rank"], rc["signal"]) == (1, "SIGKILL") and doc["culprit_ranks"] == [1], rc


def test_another_node_s_table_alone_says_nothing_of_the_silent_rank_s_end(tmp_path):
    """node1's srun --error file lists rank 0 only; rank 1, silent, was on node2: no "torchrun lists only the ranks
    that failed, so it ended of its own (exit code 0)" (that is true of the ranks of the node whose table it is)."""
    agent = tmp_path / "task-0.err"
    agent.write_text(table(0, 1))
    code, doc = postmortem(shared_log_dir(tmp_path), "--agent-log", agent)
    rc = doc["root_cause"]
    assert code == 1 and rc["rank"] == 1 and doc["culprit_ranks"] == [1], rc
    assert "exit code 0" not in rc["message"] and "killed without a trace" in rc["message"], rc["message"]


def test_a_rerun_into_the_same_log_dir_is_not_read_as_the_job_s_other_nodes(tmp_path):
    logs = shared_log_dir(tmp_path)
    old = logs / "none_oldrun00" / "attempt_0" / "0"
    old.mkdir(parents=True)
    (old / "stderr.log").write_text(PEER_LOST.format(r=0))
    for d in (old.parent, old.parent.parent):
        os.utime(d, (1000 - 3600, 1000 - 3600))  # an hour before: another job's rendezvous
    assert sorted(p.parent.name for p in node_folders.same_job_runs(logs)) == ["none_1nw9aurb", "none_29a41nqb"]
    assert node_folders.rdzv_id_of(logs / "none__uubosbl") == "none" and node_folders.rdzv_id_of(logs / "x") is None


def test_run_trainer_reads_the_other_node_s_own_table_for_a_rank_killed_there(tmp_path):
    """run-trainer's layout (<run>/logs/<host>-<addr>-<pid>/, each with its agent.stderr.log): node1's rank lost its
    peer; node2's rank was SIGKILLed, which only node2's torchrun table says. node1 named rank 1 "never entered the
    all_reduce", without the signal; now rank 1 and SIGKILL."""
    run = tmp_path / "run" / "logs"
    for node, rank in (("node1-node-856", 0), ("node2-node-854", 1)):
        rank_dir = run / node / "7_abcdefgh" / "attempt_0" / "0"
        rank_dir.mkdir(parents=True)
        (rank_dir / "stderr.log").write_text("" if rank == 1 else PEER_LOST.format(r=rank))
    (run / "node2-node-854" / "agent.stderr.log").write_text(table(1, -9))
    verdict = analysis.analyse(run / "node1-node-856", table(0, 1), "node1")
    attribution.attribute(verdict, verdict.stopped_by)  # decide()'s first step
    assert (verdict.root_cause.rank, verdict.root_cause.signal) == (1, "SIGKILL"), verdict.root_cause
    assert [(f.rank, f.category) for f in verdict.consequences] == [(0, "peer_lost")]


def test_a_job_stopped_by_its_time_limit_is_not_verified_with_every_node_s_ranks_counted(tmp_path):
    """The time limit's SIGTERM leaves every rank's log silent: not verified, and the ranks the logs hold are the
    three nodes' (it said "1 rank(s)": the newest folder's)."""
    logs = shared_log_dir(tmp_path)
    for log in logs.glob("*/attempt_0/0/stderr.log"):
        log.write_text("")
    code, doc = postmortem(logs)
    assert code == 5 and "3 rank(s) in the logs" in doc["root_cause"]["message"], doc["root_cause"]


STOPPED = ("W1129 01:14:25.777000 25986 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, "
           "shutting down workers\n")


def test_a_rank_whose_peer_died_first_as_the_scheduler_stopped_them_all_is_a_consequence_of_the_stop(tmp_path):
    """scancel under a real SLURM: SIGTERM reaches every rank at once, and rank 2's all_reduce broke as a peer died
    first ("Connection closed by peer"), the others silent. With torchrun's word of the stop: stopped from outside,
    rank 2 a consequence (it said "one of rank 0, rank 1 ended or was killed without a trace"); from the log dir
    alone the stop cannot be told from a kill -9: no rank named, never a pass."""
    logs = shared_log_dir(tmp_path)
    (next(logs.glob("none_1nw9aurb/attempt_0/0")) / "stderr.log").write_text("")  # rank 0 silent too
    agent = tmp_path / "task-0.err"
    agent.write_text(STOPPED)
    code, doc = postmortem(logs, "--agent-log", agent)
    rc = doc["root_cause"]
    assert code == 1 and rc["error_type"] == "stopped_from_outside" and rc["signal"] == "SIGTERM", rc
    assert doc["culprit_ranks"] == [] and [(c["rank"], c["category"]) for c in doc["consequences"]] == [
        (2, "peer_lost")]
    code, doc = postmortem(logs)
    assert code == 1 and doc["culprit_ranks"] == [] and doc["root_cause"]["error_type"] == "no_culprit_candidates"


def test_a_quick_rerun_on_one_node_is_told_from_another_node_by_its_ranks(tmp_path):
    """A job started within seconds of another into the same log dir (a crash at start-up, a retry wrapper) holds
    the same ranks again: rank 2's traceback in two folders is two jobs, never one job's two nodes; the folder
    nearer the newest is this job's."""
    logs = shared_log_dir(tmp_path)
    before = logs / "none_before00" / "attempt_0" / "0"
    before.mkdir(parents=True)
    (before / "stderr.log").write_text(PEER_LOST.format(r=2))
    for d in (before.parent, before.parent.parent):
        os.utime(d, (995, 995))  # 5 s before: inside SAME_START_S, only its ranks tell it apart
    assert sorted(p.parent.name for p in node_folders.same_job_runs(logs)) == ["none_1nw9aurb", "none_29a41nqb"]
