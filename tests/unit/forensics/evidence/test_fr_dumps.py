"""Unit tests of ddpdoctor/forensics/evidence/fr_dumps.py: dumps found and read safely, judged, and adopted by the post-mortem."""
from __future__ import annotations

import json
import os
import pickle

from ddpdoctor.forensics.evidence import fr_dumps
from ddpdoctor.forensics.judge import dumps as dumps_judge
from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge.verdict import Findings
from ddpdoctor.forensics.judge.attribution import adopt


def entry(seq, op="allreduce", sizes=((16,),), where=("train.py", 40, "step")):
    return {"pg_id": 0, "collective_seq_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": list(sizes),
            "input_dtypes": ["Float"], "is_p2p": False,
            "frames": [{"filename": where[0], "line": where[1], "name": where[2]}]}


def record(enqueued, completed, entries):
    return {"version": "2.10", "pg_status": {"0": {"last_enqueued_collective": enqueued,
                                                   "last_completed_collective": completed}},
            "entries": entries}


def test_json_and_pickle_dumps_are_found_by_rank(tmp_path):
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "rank0.json").write_text(json.dumps(record(5, 4, [entry(5)])))
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(record(4, 4, [entry(4)])))
    (tmp_path / "rank2.json").write_text("not a flight record")
    found = fr_dumps.find_dumps([tmp_path])
    assert sorted(found) == [0, 1] and found[1][1]["pg_status"]["0"]["last_enqueued_collective"] == 4


def test_a_crafted_pickle_cannot_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps({"entries": [Evil()]}))
    assert fr_dumps.find_dumps([tmp_path]) == {} and not (tmp_path / "pwned").exists()


def test_oversized_files_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(fr_dumps, "MAX_BYTES", 10)
    (tmp_path / "rank0.json").write_text(json.dumps(record(1, 1, [])))
    assert fr_dumps.find_dumps([tmp_path]) == {}


def test_the_rank_that_never_entered_is_the_culprit_and_the_timed_out_rank_a_consequence(tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps(record(10, 9, [entry(9), entry(10)])))
    (tmp_path / "rank1.json").write_text(json.dumps(record(9, 9, [entry(9)])))
    hang = dumps_judge.judge_dumps(fr_dumps.find_dumps([tmp_path]))
    assert hang.legacy_class == "missing_rank" and hang.verdict.culprit_ranks == [1]
    verdict = Findings(root_cause=RankFailure(rank=0, local_rank=0, host="n0", exit_code=1, category="timeout",
                                             message="Watchdog caught collective operation timeout"))
    adopt(verdict, hang)
    assert verdict.root_cause.rank == 1 and verdict.root_cause.category == "hang"
    assert verdict.consequences[0].rank == 0 and verdict.consequences[0].victim


def test_a_real_error_stays_the_root_cause(tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps(record(10, 9, [entry(9), entry(10)])))
    (tmp_path / "rank1.json").write_text(json.dumps(record(9, 9, [entry(9)])))
    hang = dumps_judge.judge_dumps(fr_dumps.find_dumps([tmp_path]))  # names rank 1: missing from #10
    assert hang.verdict.culprit_ranks == [1]
    verdict = Findings(root_cause=RankFailure(rank=0, local_rank=0, host="n0", exit_code=1, category="exception",
                                             error_type="ValueError"))
    adopt(verdict, hang)
    assert verdict.root_cause.error_type == "ValueError" and verdict.consequences == []


def test_a_culprit_stopped_before_it_raised_is_placed_by_its_stack_at_the_launchers_sigterm(tmp_path):
    """gloo's JSON record has no call sites and rank 2, stopped by torchrun before its own error, left no
    traceback: the stack the bootstrap wrote on that SIGTERM names the line of its odd call. A stack far older
    than the rank's record (another attempt's) is not used."""
    fr, stacks = tmp_path / "flight_recorder", tmp_path / "stacks" / "sigterm"
    fr.mkdir()
    stacks.mkdir(parents=True)
    bare = {k: v for k, v in entry(7).items() if k != "frames"}
    for r in (0, 1, 2):
        call = dict(bare, input_dtypes=["Double" if r == 2 else "Float"])
        (fr / f"rank{r}.json").write_text(json.dumps(record(7, 6, [call])))
    (stacks / "rank2.txt").write_text(
        'Current thread 0x00007f00 (most recent call first):\n  File "/usr/lib/python3.11/threading.py", line 975 '
        'in run\n\nThread 0x00007f01 (most recent call first):\n'
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
        '  File "/jobs/train.py", line 58 in log_metric\n  File "/jobs/train.py", line 90 in main\n'
        '  File "/jobs/train.py", line 101 in <module>\n')

    def adopted():
        verdict = Findings(root_cause=RankFailure(rank=0, local_rank=0, host="n0", exit_code=-15, category="timeout",
                                                 message="timed out"))
        return exit_dumps_adopted(verdict, tmp_path)

    root = adopted()
    assert root.rank == 2 and root.error_type == "desync" and root.location == "/jobs/train.py:58"
    os.utime(stacks / "rank2.txt", (1_000_000_000, 1_000_000_000))
    assert adopted().location is None


def test_a_culprits_own_traceback_outranks_its_stack_and_an_exiting_stack_says_nothing(tmp_path):
    """Seen in CI: rank 2 had raised ("Connection reset", its traceback at its odd call) and was exiting when the
    launcher's SIGTERM came; its stack then held only the bootstrap's handler, which was named as the location.
    A rank with a traceback keeps its traceback's line; a stack without the script's <module> frame is unused."""
    fr, stacks = tmp_path / "flight_recorder", tmp_path / "stacks" / "sigterm"
    fr.mkdir()
    stacks.mkdir(parents=True)
    bare = {k: v for k, v in entry(7).items() if k != "frames"}
    for r in (0, 1, 2):
        (fr / f"rank{r}.json").write_text(json.dumps(record(7, 6, [dict(bare, input_dtypes=[
            "Double" if r == 2 else "Float"])])))
    (stacks / "rank2.txt").write_text(
        'Current thread 0x00007f00 (most recent call first):\n'
        '  File "/src/ddpdoctor/launch/bootstrap.py", line 211 in dump_stack_at_sigterm\n'
        '  File "/src/ddpdoctor/launch/bootstrap.py", line 184 in _die_of_sigterm\n'
        '  File "/src/ddpdoctor/launch/bootstrap.py", line 161 in _on_sigterm\n'
        '  File "/src/ddpdoctor/launch/bootstrap.py", line 130 in dump_flight_record\n')

    def adopted(own_location):
        verdict = Findings(root_cause=RankFailure(rank=0, local_rank=0, host="n0", exit_code=-15, category="timeout",
                                                 message="timed out"),
                          consequences=[RankFailure(rank=2, local_rank=2, host="n0", exit_code=1, category="peer_lost",
                                                    message="Connection reset by peer", location=own_location)])
        return exit_dumps_adopted(verdict, tmp_path)

    assert adopted("/jobs/train.py:58").location == "/jobs/train.py:58"
    root = adopted(None)
    assert root.rank == 2 and root.location is None


def test_dumps_named_as_torch_names_them_are_found(tmp_path):
    """TORCH_FR_DUMP_TEMP_FILE=<dir>/rank_ gives rank_0, rank_1 (torch's own naming: the prefix, then the rank);
    --fr-dir ignored them (issue 37)."""
    import json

    from ddpdoctor.forensics.evidence.fr_dumps import find_dumps

    for r in (0, 1):
        (tmp_path / f"rank_{r}").write_text(json.dumps({"pg_status": {}, "entries": [
            {"collective_seq_id": 1, "pg_id": 0, "process_group": ["0", "default_pg"],
             "profiling_name": "gloo:all_reduce", "frames": []}]}))
    assert sorted(find_dumps([tmp_path])) == [0, 1]


def exit_dumps_adopted(findings, run_dir):
    """run-trainer's end of a failed job: the exit dumps gathered, decide() attributes; the root cause it kept."""
    from ddpdoctor.forensics.judge.decide import Context, Evidence, Failures, decide
    from ddpdoctor.forensics.postmortem import trainer_run

    judged, _, _ = trainer_run.exit_dumps(findings, run_dir)
    decide(Evidence(dumps=judged), Failures(findings=findings), Context("run-trainer", failed=True))
    return findings.root_cause
