"""Issue 53 item 5: a folder holds another node of this job only when it says so (its rendezvous id, attempts, start
and ranks), never because it is a sibling. `postmortem logs/$SLURM_JOB_ID` beside other jobs' folders, or one of
torchelastic's default folders beside others in the temporary folder, read a 2-rank job as 5 (a 3-rank one as 34)."""
from __future__ import annotations

import json
import os

from ddpdoctor.forensics.postmortem import node_folders
from ddpdoctor.forensics.postmortem.engine import explain
from tests.unit.helpers import run_cli


def job(folder, run_name: str, ranks: int, started: float, killed: int | None = None):
    """A plain torchrun log dir: <folder>/<run_name>/attempt_0/<local rank>/, each rank's log silent or saying
    its rank, started at ``started`` (mtime)."""
    attempt = folder / run_name / "attempt_0"
    for local in range(ranks):
        rank_dir = attempt / str(local)
        rank_dir.mkdir(parents=True)
        (rank_dir / "stdout.log").write_text("")
        (rank_dir / "stderr.log").write_text("" if local == killed else f"[rank{local}]: step 3 done\n")
    for d in (attempt, attempt.parent):
        os.utime(d, (started, started))
    return folder


def test_other_jobs_folders_beside_the_log_dir_are_not_its_nodes(tmp_path):
    """`--log-dir logs/$SLURM_JOB_ID`: the job's siblings are other jobs (torchrun's default rendezvous id "none"
    in every one of them, started seconds apart)."""
    mine = job(tmp_path / "logs" / "1234", "none_abcdefgh", 2, 1000.0)
    job(tmp_path / "logs" / "1233", "none_ijklmnop", 3, 1003.0)
    job(tmp_path / "logs" / "1235", "none_qrstuvwx", 3, 1004.0)
    assert node_folders.other_nodes(mine) == []
    doc = explain(mine, None, [])
    assert doc["verdict"] == "warn" and "2 rank(s)" in json.dumps(doc), doc["root_cause"]


def test_torchelastic_default_folders_in_the_temporary_folder_are_each_their_own_job(tmp_path):
    mine = job(tmp_path / "torchelastic_a1b2c3", "none_abcdefgh", 3, 1000.0)
    for i, name in enumerate(("torchelastic_d4e5f6", "torchelastic_g7h8i9", "torchelastic_zzzzzz")):
        job(tmp_path / name, f"none_{i}bcdefgh", 3 + i, 1001.0 + i)
    assert node_folders.other_nodes(mine) == []


def test_a_node_folder_that_says_it_is_of_this_job_is_still_read(tmp_path):
    """run-trainer's layout: each node's folder under <run>/logs/, the same rendezvous id (the run id), started
    together, other ranks: another node of this job. The same id started ten minutes later: a rerun, not a node."""
    logs = tmp_path / "run" / "logs"
    mine = job(logs / "node1-10.0.0.1-100", "7_abcdefgh", 1, 1000.0)
    job(logs / "node2-10.0.0.2-200", "7_ijklmnop", 1, 1001.0)
    (logs / "node2-10.0.0.2-200" / "7_ijklmnop" / "attempt_0" / "0" / "stderr.log").write_text("[rank1]: x\n")
    job(logs / "node3-10.0.0.3-300", "7_qrstuvwx", 1, 1600.0)
    assert [host for host, _ in node_folders.other_nodes(mine)] == ["node2"]


def test_the_same_verdict_alone_and_beside_other_jobs(tmp_path):
    alone = job(tmp_path / "a" / "1234", "none_abcdefgh", 2, 1000.0, killed=1)
    crowded = job(tmp_path / "b" / "1234", "none_abcdefgh", 2, 1000.0, killed=1)
    for n in range(5):
        job(tmp_path / "b" / f"12{n}0", f"none_{n}xxxxxxx", 3, 1000.0 + n)

    def verdict(logs):
        p = run_cli("postmortem", str(logs), "--json", "--no-save")
        doc = json.loads(p.stdout)
        return p.returncode, doc["verdict"], doc["culprit_ranks"], (doc["root_cause"] or {}).get("message")

    assert verdict(alone) == verdict(crowded)
