"""Unit tests of ddpdoctor/forensics/judge/streams.py: the rank whose copy of the one pending collective was
scheduled but never started is the one whose stream is stuck. The records are NCCL-shaped as torch 2.13's own
writer lays them out (torch/include/torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, dump_json, lines
567-581: "state" is completed if time_discovered_completed_, else started if time_discovered_started_, else
scheduled, and time_discovered_started_ns 0 when never seen; getPgStatusJson, lines 494-499: pg_status values
are strings, last_started_collective among them). A CPU cannot produce them (gloo records no such states)."""
from __future__ import annotations

import json

from ddpdoctor.forensics.evidence import fr_dumps, worker_server
from ddpdoctor.forensics.judge import Category, NoCulprit, judge
from ddpdoctor.forensics.judge.dumps import judge_dumps
from ddpdoctor.forensics.judge.words import to_json


def record(pending_state: str, last: int = 7, ranks: str = "[0, 1, 2]") -> dict:
    entries = []
    for s in range(1, last + 1):
        state = "completed" if s < last else pending_state
        entries.append({"record_id": s, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": s,
                        "p2p_seq_id": 0, "op_id": s, "profiling_name": "nccl:all_reduce", "time_created_ns": s * 1000,
                        "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
                        "output_dtypes": ["Float"], "state": state,
                        "time_discovered_started_ns": 0 if state == "scheduled" else s * 1000 + 1,
                        "time_discovered_completed_ns": s * 1000 + 2 if state == "completed" else 0,
                        "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False, "frames": []})
    started = last if pending_state == "started" else last - 1
    return {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
            "pg_status": {"0": {"last_enqueued_collective": str(last), "last_started_collective": str(started),
                                "last_completed_collective": str(last - 1)}}, "entries": entries}


def job(states: dict[int, str]):
    return worker_server.job({r: {"host": f"n{r}", "pid": 100 + r, "state": "running", "fr": record(s),
                                  "stacks": None} for r, s in states.items()})


def test_the_rank_that_never_started_the_collective_everyone_enqueued_is_named_live():
    evidence = job({0: "started", 1: "scheduled", 2: "started"})
    v = judge(evidence)
    assert v.category == Category.STUCK_COLLECTIVE and v.culprit_ranks == [1] and v.no_culprit is None
    assert v.culprits[0].named and v.waiting == [0, 2]
    doc = to_json(v, evidence)
    assert "rank(s) 1 never started all_reduce #7" in doc["summary"] and "stream" in doc["fix"]
    assert sorted(c["rank"] for c in doc["consequences"]) == [0, 2]


def test_the_same_from_dumps_after_the_job_ended(tmp_path):
    for r, s in {0: "started", 1: "scheduled", 2: "started"}.items():
        (tmp_path / f"nccl_trace_rank_{r}.json").write_text(json.dumps(record(s)))
    hang = judge_dumps(fr_dumps.find_dumps([tmp_path]))
    assert hang.verdict.culprit_ranks == [1] and "scheduled, not started" in hang.summary()
    assert "stream" in hang.fix()


def test_every_rank_started_is_still_a_stuck_communication_naming_nobody():
    v = judge(job({0: "started", 1: "started", 2: "started"}))
    assert v.category == Category.STUCK_COLLECTIVE and v.no_culprit == NoCulprit.EVERYONE


def test_a_rank_that_never_enqueued_it_stays_the_missing_rank():
    evidence = job({0: "started", 2: "scheduled"})
    evidence.ranks[1] = worker_server.job({1: {"host": "n1", "pid": 101, "state": "running", "fr": record(
        "completed", last=6), "stacks": None}}).ranks[1]
    v = judge(evidence)
    assert v.category == Category.MISSING_RANK and v.culprit_ranks == [1], (v.category, v.culprit_ranks)
