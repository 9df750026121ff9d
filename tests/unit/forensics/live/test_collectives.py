"""The hang judge and the self-calibrating threshold on recorded evidence: flight-recorder documents shaped
as torch 2.13's `_dump_fr_trace` gives them for gloo, faulthandler stacks as the worker server answers."""
from __future__ import annotations

from ddpdoctor.forensics.live import collectives
from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge import classify as rules
from ddpdoctor.forensics.live.stall import Threshold

USER = "/home/u/train.py"


def entry(seq, op="all_reduce", sizes=((16,),), line=20, func="main", dtype="Float"):
    return {"collective_seq_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"], "profiling_name": f"gloo:{op}",
            "input_sizes": [list(s) for s in sizes], "input_dtypes": [dtype] * len(sizes), "is_p2p": False,
            "retired": True, "state": "scheduled",
            "frames": [{"name": op, "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 3245},
                       {"name": func, "filename": USER, "line": line},
                       {"name": "<module>", "filename": USER, "line": 40}]}


def fr(enqueued, completed, entries):
    return {"pg_status": {"0": {"last_enqueued_collective": str(enqueued), "last_completed_collective": str(completed),
                                "last_started_collective": "-1"}}, "entries": entries}


def stack(line, func):
    return ("Current thread 0x00007f6cb633c6c0 (most recent call first):\n  <no Python frame>\n\n"
            "Thread 0x00007f6cd6c36b80 (most recent call first):\n"
            '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
            f'  File "{USER}", line {line} in {func}\n  File "{USER}", line 40 in <module>\n')


def rank(fr_doc, stacks, state="running", host="n0"):
    return {"host": host, "pid": 100, "state": state, "fr": fr_doc, "stacks": stacks}


def test_rank_that_never_entered_the_collective_is_the_culprit():
    ev = {0: rank(fr(6, 5, [entry(i) for i in range(1, 7)]), stack(20, "main")),
          1: rank(fr(5, 5, [entry(i) for i in range(1, 6)]), stack(9, "get_batch"), host="n1")}
    v = collectives.judge(ev)
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [1]
    assert v["culprits"][0] == {"rank": 1, "host": "n1", "node": None, "pid": 100, "state": "running",
                                "where": f"{USER}:9", "function": "get_batch"}
    assert v["collective"]["seq"] == 6 and v["collective"]["waiting_ranks"] == [0]
    assert v["collective"]["call_site"] == {"where": f"{USER}:20", "function": "main"}
    assert [c["rank"] for c in v["consequences"]] == [0]


def test_different_ops_at_one_sequence_id_is_a_desync_and_the_new_call_is_odd():
    history = [entry(i) for i in range(1, 6)]
    ev = {0: rank(fr(6, 5, history + [entry(6, op="barrier", sizes=(), line=31, func="save")]), stack(31, "save")),
          1: rank(fr(6, 5, history + [entry(6)]), stack(20, "main"))}
    v = collectives.judge(ev)
    assert v["class"] == "desync" and [c["rank"] for c in v["culprits"]] == [0]
    assert v["collective"]["calls"]["0"]["op"] == "barrier" and v["collective"]["calls"]["0"]["where"] == f"{USER}:31"
    assert v["collective"]["calls"]["1"]["where"] == f"{USER}:20"


def test_the_collective_judged_is_placed_where_the_majority_called_it_not_the_odd_rank():
    """gloo's records carry no frames: the call site comes from the stacks, of a rank that made the call judged
    (the all_reduce at line 20), never the odd rank's barrier (line 31), as a rank-0-only barrier showed."""
    def bare(e):
        return {k: v for k, v in e.items() if k != "frames"}

    history = [bare(entry(i)) for i in range(1, 6)]
    ev = {0: rank(fr(6, 5, history + [bare(entry(6, op="barrier", sizes=()))]), stack(31, "save")),
          **{r: rank(fr(6, 5, history + [bare(entry(6))]), stack(20, "main")) for r in (1, 2)}}
    v = collectives.judge(ev)
    assert v["class"] == "desync" and [c["rank"] for c in v["culprits"]] == [0]
    assert v["collective"]["op"] == "all_reduce" and v["collective"]["call_site"]["where"] == f"{USER}:20"
    assert v["culprits"][0]["where"] == f"{USER}:31"


def test_other_shape_on_the_minority_rank_is_a_desync():
    ev = {r: rank(fr(3, 2, [entry(1), entry(2), entry(3, sizes=((8,),) if r == 2 else ((16,),))]), stack(20, "main"))
          for r in range(3)}
    v = collectives.judge(ev)
    assert v["class"] == "desync" and [c["rank"] for c in v["culprits"]] == [2]


def test_all_inside_the_same_collective_is_the_communication():
    ev = {r: rank(fr(3, 2, [entry(1), entry(2), entry(3)]), stack(20, "main"), host=f"n{r}") for r in range(2)}
    v = collectives.judge(ev)
    assert v["class"] == "stuck_collective" and "n0, n1" in v["summary"]


def test_stopped_or_gone_process_comes_first():
    ev = {0: rank(fr(3, 2, [entry(3)]), stack(20, "main")), 1: rank(None, None, state="stopped")}
    v = collectives.judge(ev)
    assert v["class"] == "process_stopped" and v["culprits"][0]["rank"] == 1
    assert collectives.judge({0: rank(None, None, state="gone")})["class"] == "process_gone"


def test_nobody_in_a_collective_and_nobody_answering():
    ev = {r: rank(fr(5, 5, [entry(5)]), stack(9, "load")) for r in range(2)}
    assert collectives.judge(ev)["class"] == "outside_collectives"
    assert collectives.judge({0: rank(None, None)})["class"] == "unknown"


def test_a_silent_rank_is_missing_evidence_not_innocent():
    ev = {0: rank(fr(3, 2, [entry(3)]), stack(20, "main")), 1: rank(None, None)}
    v = collectives.judge(ev)
    assert v["class"] == "missing_rank" and v["no_evidence"] == [1]


def test_threshold_calibrates_after_warmup_with_a_floor():
    t = Threshold(None)  # judge.policy: a 30 s floor, 5 x the longest gap after 5 warm-up events
    assert t.value() is None and not t.fired(1000.0, 0.0)  # not armed before any progress
    now = 0.0
    for gap in (20.0, 20.0, 20.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0):  # slow first steps, then one per second
        now += gap
        t.progressed(now)
    assert t.value() == 30.0 and "warm-up" in t.describe()["why"]  # the slow start does not count
    for _ in range(3):
        now += 8.0  # an evaluation pause: the threshold grows with what the job has shown
        t.progressed(now)
    assert t.value() == 40.0
    assert not t.fired(now + 39.0, 0.0) and t.fired(now + 41.0, 0.0)
    fixed = Threshold(6.0)
    assert fixed.fired(7.0, 0.0) and fixed.describe()["source"] == "--hang-timeout"


ABORT_LOG = """terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 16 vs 8. Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?
Fatal Python error: Aborted

Thread 0x00007f7b94650b80 (most recent call first):
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/tmp/h2/faults.py", line 15 in main
  File "/tmp/h2/faults.py", line 22 in <module>
  File "/work/main/ddpdoctor/launch/bootstrap.py", line 131 in run_source

Extension modules: numpy._core._multiarray_umath, torch._C"""


def test_sigabrt_after_an_uncaught_cpp_exception_says_what_and_where():
    f = RankFailure(rank=1, local_rank=1, host="h", exit_code=-6, log_tail=ABORT_LOG)
    f = rules.classify(f)
    assert f.signal == "SIGABRT" and f.error_type == "EnforceNotMet" and "collective mismatch" in f.message
    assert f.category == "desync" and f.location == "/tmp/h2/faults.py:15" and not f.victim


def grouped(rank_id, pairs_done, pair_name, pair_seq, world_seq, world_done):
    """A rank of `new_group([0, 1])`, `new_group([2, 3])`: its pair is pg_id 1 on every rank (a rank's own
    numbering), named "1" on ranks 0-1 and "2" on ranks 2-3; the world group is pg_id 0, named "0"."""
    def e(pg_id, name, seq, line):
        return {**entry(seq, line=line), "pg_id": pg_id, "process_group": [name, "undefined" if pg_id else "default_pg"]}

    entries = [e(1, pair_name, s, 16) for s in range(1, pair_seq + 1)] + [e(0, "0", s, 17) for s in range(1, world_seq + 1)]
    status = {"0": {"last_enqueued_collective": str(world_seq), "last_completed_collective": str(world_done)},
              "1": {"last_enqueued_collective": str(pair_seq), "last_completed_collective": str(pairs_done)}}
    return {"pg_status": status, "entries": entries}


def test_subgroups_are_matched_by_name_and_a_rank_waiting_in_its_own_group_is_no_culprit():
    """Rank 3 sleeps before its pair's all_reduce: rank 2 waits in group "2" for it, ranks 0-1 in the world
    all_reduce for ranks 2 and 3. Keyed by pg_id, groups "1" and "2" were one group (rank 2 blamed with 3)."""
    ev = {0: rank(grouped(0, 6, "1", 6, 6, 5), stack(17, "main")),
          1: rank(grouped(1, 6, "1", 6, 6, 5), stack(17, "main")),
          2: rank(grouped(2, 5, "2", 6, 5, 5), stack(16, "main")),
          3: rank(grouped(3, 5, "2", 5, 5, 5), stack(15, "main"))}
    v = collectives.judge(ev)
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [3], v["summary"]
    assert v["collective"]["pg"] == "2" and v["collective"]["waiting_ranks"] == [2]
    assert "rank(s) 2 waited too" in v["summary"] and "process group 0" in v["summary"]
    assert "no_evidence" not in v  # ranks 0-1 answered: they are not in group "2", not silent
    assert sorted(c["rank"] for c in v["consequences"]) == [0, 1, 2]
    # the same after the timeout (gloo counts the timed-out collectives as completed): the sequence ids tell
    done = {0: rank(grouped(0, 6, "1", 6, 6, 6), ""), 1: rank(grouped(1, 6, "1", 6, 6, 6), ""),
            2: rank(grouped(2, 6, "2", 6, 5, 5), ""), 3: rank(grouped(3, 5, "2", 5, 5, 5), "")}
    v = collectives.judge(done, source="dumps")
    assert [c["rank"] for c in v["culprits"]] == [3] and v["collective"]["pg"] == "2", v["summary"]


def test_a_cross_group_deadlock_names_no_culprit_and_says_why():
    """Rank 0 waits in group "0" for rank 1, which waits in group "1" for rank 0: no rank waits in nothing, so
    the waits go round in a cycle and no rank is named (issue 30: a cycle is said honestly, not blamed on the
    first group's missing rank)."""
    ev = {0: rank(grouped(0, 5, "1", 5, 6, 5), stack(17, "main")),
          1: rank(grouped(1, 5, "1", 6, 5, 5), stack(16, "main"))}
    v = collectives.judge(ev)
    assert v["culprits"] == [] and v["no_culprit"] == "cycle" and "circle" in v["summary"], v["summary"]
    assert v["collective"]["pg"] == "0"


def test_a_rank_guarded_collective_in_a_second_group_names_the_rank_the_majority_does_not_wait_with():
    """Three ranks, the world and a metrics group over all three: only rank 2 all_reduces its metrics at one
    step (`if rank == world - 1:`), ranks 0-1 go on into the world's next all_reduce. Ranks 0-1 wait for rank 2
    there, rank 2 waits for them in the metrics group: a cycle, but two of the three stand in the world's
    collective and rank 2 alone in one they never call: rank 2 is named, the others only waited."""
    ev = {0: rank(grouped(0, 5, "1", 5, 7, 6), stack(17, "main")),
          1: rank(grouped(1, 5, "1", 5, 7, 6), stack(17, "main")),
          2: rank(grouped(2, 5, "1", 6, 6, 6), stack(16, "main"))}
    v = collectives.judge(ev)
    assert [c["rank"] for c in v["culprits"]] == [2] and v.get("no_culprit") is None, v["summary"]
    assert v["culprits"][0]["where"] == f"{USER}:16"
    assert sorted(c["rank"] for c in v["consequences"]) == [0, 1]


def test_a_rank_that_answered_before_its_first_collective_never_entered_it():
    """Rank 1 is still loading its data when rank 0 waits in DDP's first collective: its flight recorder
    answers empty. It is the rank missing from the collective, not a rank that 'did not answer'."""
    ev = {0: rank(fr(1, 0, [entry(1, op="all_gather")]), stack(18, "main")),
          1: rank({"pg_status": {}, "entries": []}, stack(10, "load_dataset"))}
    v = collectives.judge(ev)
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [1], v["summary"]
    assert "did not answer" not in v["summary"] and "no_evidence" not in v
    assert v["culprits"][0]["where"] == f"{USER}:10"


def test_the_straggler_is_measured_within_a_group_by_its_name():
    """pg_id 1 is group "1" on ranks 0-1 and "2" on ranks 2-3: their collectives are not the same ones."""
    frs = {r: grouped(r, 6, "1" if r < 2 else "2", 6, 0, 0) for r in range(4)}
    for r, doc in frs.items():  # ranks 2-3 call their pair's collectives 5 s after ranks 0-1 call theirs
        for e in doc["entries"]:
            e["time_created_ns"] = int((100 + e["collective_seq_id"] + (5 if r >= 2 else 0)) * 1e9)
    assert collectives.summarise(frs)["straggler"] is None
