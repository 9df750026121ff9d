"""The hang judge and the self-calibrating threshold on recorded evidence: flight-recorder documents shaped
as torch 2.13's `_dump_fr_trace` gives them for gloo, faulthandler stacks as the worker server answers."""
from __future__ import annotations

from ddpdoctor.launch import collectives, postmortem
from ddpdoctor.launch.stall import Threshold

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
    t = Threshold(None, floor=30.0, factor=5.0, warmup=5)
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
    f = postmortem.RankFailure(rank=1, local_rank=1, host="h", exit_code=-6, log_tail=ABORT_LOG)
    f = postmortem.classify(f)
    assert f.signal == "SIGABRT" and f.error_type == "EnforceNotMet" and "collective mismatch" in f.message
    assert f.category == "desync" and f.location == "/tmp/h2/faults.py:15" and not f.victim
