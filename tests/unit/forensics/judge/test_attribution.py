"""Who the others waited for when the user's own process-group timeout fired first: dumps written after a timeout
(gloo counts the timed-out collective as completed), log dirs without any dump, mismatches judged by majority,
the watchdog's deadline from the flight recorder's timeout_ms, and advice that never exceeds the user's timeout."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ddpdoctor.forensics.judge import attribution
from ddpdoctor.forensics.live import collectives
from ddpdoctor.forensics.evidence import worker_client, fr_dumps
from ddpdoctor.forensics.judge import dumps as dumps_judge
from ddpdoctor.forensics.live.hang import Watchdog
from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge.classify import classify, exception_line
from ddpdoctor.forensics.judge.verdict import Findings

USER = "/home/u/train.py"



def judged_with_silent(fails, folder):
    """(root, rest, the silent ranks): attribution.judge's answer and the attempt folder's ranks with no record, as
    postmortem's collector reads them (node_folders.ranks_without_record) for decide's attribution."""
    from ddpdoctor.forensics.postmortem.node_folders import ranks_without_record

    silent = ranks_without_record(folder, fails, "h")
    root, rest = attribution.judge(fails)
    return root, rest, silent

def entry(seq, op="all_reduce", dtype="Float", sizes=((16,),), line=20, created=None, timeout_ms=15000):
    return {"collective_seq_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"], "profiling_name": f"gloo:{op}",
            "input_sizes": [list(s) for s in sizes], "input_dtypes": [dtype] * len(sizes), "is_p2p": False,
            "time_created_ns": int((created if created is not None else 1000.0 + seq) * 1e9), "timeout_ms": timeout_ms,
            "frames": [{"name": "main", "filename": USER, "line": line}]}


def fr(enqueued, completed, entries, ranks="[0, 1, 2]"):
    return {"pg_config": {"": {"name": "", "desc": "", "ranks": ranks}},
            "pg_status": {"0": {"last_enqueued_collective": str(enqueued), "last_completed_collective": str(completed)}},
            "entries": entries}


def dumps(records: dict[int, dict]) -> dict:
    return {r: (Path(f"/d/rank{r}.json"), rec) for r, rec in records.items()}


def test_after_a_timeout_the_last_sequence_ids_say_who_was_behind():
    """gloo: the timed-out ranks' pg_status says 14 completed of 14; the culprit's 13 of 13."""
    hist = [entry(i) for i in range(10, 14)]
    v = dumps_judge.judge_dumps(dumps({0: fr(14, 14, hist + [entry(14)]), 1: fr(13, 13, hist), 2: fr(14, 14, hist + [entry(14)])})).to_json()
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [1], v
    # issue 30: its last collective's call site is where it was last seen, not where it stands (no location)
    assert "rank 1: 13" in v["summary"] and v["culprits"][0]["where"] is None
    assert v["culprits"][0]["last_seen_where"] == f"{USER}:20"
    assert [c["rank"] for c in v["consequences"]] == [0, 2]


def test_a_rank_without_a_dump_is_named_from_pg_config():
    hist = [entry(i) for i in range(1, 5)]
    v = dumps_judge.judge_dumps(dumps({0: fr(4, 4, hist), 2: fr(4, 4, hist)})).to_json()
    assert v["class"] == "missing_rank" and [c["rank"] for c in v["culprits"]] == [1] and v["likely"], v
    assert dumps_judge.judge_dumps(dumps({0: fr(4, 4, hist), 1: fr(4, 4, hist), 2: fr(4, 4, hist)})).legacy_class == "unknown"


def test_mismatch_by_majority_and_no_majority_on_two_ranks():
    hist = [entry(i) for i in range(1, 4)]
    four = {r: fr(4, 4, hist + [entry(4, dtype="Double" if r == 2 else "Float")], ranks="[0, 1, 2, 3]") for r in range(4)}
    v = dumps_judge.judge_dumps(dumps(four)).to_json()
    assert v["class"] == "desync" and [c["rank"] for c in v["culprits"]] == [2] and "3 rank(s) that agree" in v["summary"]
    two = {r: fr(4, 4, hist + [entry(4, sizes=((8,),) if r == 1 else ((16,),))], ranks="[0, 1]") for r in range(2)}
    v = dumps_judge.judge_dumps(dumps(two)).to_json()
    assert v["class"] == "desync" and v["culprits"] == [] and v["no_majority"] and "no majority" in v["summary"]


def test_the_aborted_rank_is_not_the_culprit_of_a_mismatch():
    """4 ranks, rank 2 float64: gloo aborts healthy rank 1; the dumps' majority names rank 2."""
    aborted = RankFailure(rank=1, local_rank=1, host="h", exit_code=-6, signal="SIGABRT", category="desync",
                          error_type="EnforceNotMet", message="Received data size doesn't match expected size")
    odd = RankFailure(rank=2, local_rank=2, host="h", exit_code=1, category="peer_lost", victim=True,
                      reason="its collective broke because a peer process died", location=f"{USER}:58")
    verdict = Findings(root_cause=aborted, consequences=[odd])
    hist = [entry(i) for i in range(1, 4)]
    hang = dumps_judge.judge_dumps(dumps({r: fr(4, 4, hist + [entry(4, dtype="Double" if r == 2 else "Float")],
                                             ranks="[0, 1, 2, 3]") for r in (0, 2, 3)}))
    attribution.adopt(verdict, hang)
    assert verdict.root_cause.rank == 2 and verdict.root_cause.location == f"{USER}:20"
    assert [f.rank for f in verdict.consequences] == [1] and "detected the mismatch" in verdict.consequences[0].reason
    assert "waited for rank 2" not in verdict.root_cause.message  # never its own consequence


def test_the_culprit_s_own_transport_error_is_not_appended_to_its_verdict():
    """The odd rank's own record is the transport error of losing the rank gloo aborted: noise, not its story."""
    aborted = RankFailure(rank=1, local_rank=1, host="h", exit_code=-6, signal="SIGABRT", category="desync",
                          error_type="EnforceNotMet", message="Received data size doesn't match expected size")
    odd = classify(RankFailure(rank=2, local_rank=2, host="h", exit_code=1, error_type="RuntimeError",
                               message="[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:29066: "
                                       "Connection reset by peer"))
    assert odd.category == "peer_lost"
    verdict = Findings(root_cause=aborted, consequences=[odd])
    hist = [entry(i) for i in range(1, 4)]
    attribution.adopt(verdict, dumps_judge.judge_dumps(dumps({r: fr(4, 4, hist + [entry(4, dtype="Double" if r == 2 else "Float")],
                                                                 ranks="[0, 1, 2, 3]") for r in (0, 2, 3)})))
    assert verdict.root_cause.rank == 2 and verdict.root_cause.exit_code == 1
    assert "its own record" not in verdict.root_cause.message and "reset by peer" not in verdict.root_cause.message


def test_a_desync_from_dumps_without_frames_names_no_unknown_call_site():
    """The bootstrap's exit dumps on gloo carry no frames: each rank's call is listed without an ' at ?'."""
    def bare(e):
        return {k: v for k, v in e.items() if k != "frames"}

    hist = [bare(entry(i)) for i in range(1, 4)]
    v = dumps_judge.judge_dumps(dumps({r: fr(4, 4, hist + [bare(entry(4, dtype="Double" if r == 2 else "Float"))],
                                          ranks="[0, 1, 2, 3]") for r in range(4)})).to_json()
    assert [c["rank"] for c in v["culprits"]] == [2] and "rank 2: all_reduce [[16]] ['Double']" in v["summary"]
    assert " at ?" not in v["summary"], v["summary"]


def from_traceback(rank, tb, **kw):
    """A rank's failure as the post-mortem reads it from its record: the traceback, its last line, classified."""
    f = RankFailure(rank=rank, local_rank=rank, host="h", exit_code=1, traceback=tb, message=tb.splitlines()[-1], **kw)
    f.error_type, _ = exception_line(f.message, tb)
    return classify(f)


def timed_out(rank, op="all_reduce", line=20):
    tb = (f'Traceback (most recent call last):\n  File "{USER}", line {line}, in main\n'
          f'  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252, in {op}\n    work.wait()\n'
          "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv operation")
    return from_traceback(rank, tb, location=f"{USER}:{line}")


def test_no_dump_the_rank_stopped_without_timing_out_is_the_likely_culprit(tmp_path):
    stopped = classify(RankFailure(rank=1, local_rank=1, host="h", exit_code=-15))
    fails = [timed_out(0), stopped, timed_out(2)]
    attribution.refine_timeouts(fails)
    root, rest = attribution.blame_the_absent(fails[0], fails[1:], [], "h")
    assert root.rank == 1 and root.error_type == "likely_missing_rank" and root.message.startswith("likely rank 1")
    assert sorted(f.rank for f in rest) == [0, 2] and all(f.victim and "waited in all_reduce" in f.reason for f in rest)
    assert "--hang-timeout 7" in root.fix and "300" not in root.fix  # below the user's 15 s timeout


def test_no_dump_and_no_agent_log_a_rank_dir_without_any_record_is_the_likely_culprit(tmp_path):
    for r in range(3):
        (tmp_path / str(r)).mkdir()
        (tmp_path / str(r) / "stderr.log").write_text("")
    from ddpdoctor.forensics.postmortem.node_folders import ranks_without_record

    fails = [timed_out(0), timed_out(2)]
    silent = ranks_without_record(tmp_path, fails, "h")  # the collector reads the folders, the judge the ranks
    root, rest = attribution.blame_the_absent(fails[0], fails[1:], silent, "h")
    assert root.rank == 1 and "left no error" in root.message


def test_no_dump_every_rank_timed_out_the_minority_call_is_odd():
    fails = [timed_out(0, op="barrier", line=31), timed_out(1), timed_out(2)]
    root, rest = attribution.blame_the_absent(fails[0], fails[1:], [], "h")
    assert root.rank == 0 and root.error_type == "likely_desync" and root.location == f"{USER}:31"
    two = [timed_out(0, op="barrier", line=31), timed_out(1)]
    root, _ = attribution.blame_the_absent(two[0], two[1:], [], "h")
    assert root.rank is None and root.error_type == "desync_no_majority"  # two ranks: nobody picked by order
    same = [timed_out(0), timed_out(1)]
    assert attribution.blame_the_absent(same[0], same[1:], [], "h")[0].error_type == "stuck_collective"


def test_no_dump_the_odd_call_s_rank_is_not_its_own_consequence():
    """3 ranks, rank 0 alone in a barrier (all timed out): rank 0 is the likely culprit and not also listed as
    'timed out in barrier'; the others waited for it. Two odd ranks out of five: the second is a culprit too."""
    fails = [timed_out(0, op="barrier", line=31), timed_out(1), timed_out(2)]
    root, rest = attribution.blame_the_absent(fails[0], fails[1:], [], "h")
    assert root.rank == 0 and root.exit_code == 1 and [f.rank for f in rest] == [1, 2], [f.rank for f in rest]
    assert all(f.victim and f.reason == "timed out in all_reduce for rank 0" for f in rest)
    five = [timed_out(0, op="barrier", line=31), timed_out(1), timed_out(2), timed_out(3, op="barrier", line=31),
            timed_out(4)]
    root, rest = attribution.blame_the_absent(five[0], five[1:], [], "h")
    assert root.rank == 0 and 0 not in [f.rank for f in rest]
    assert attribution.culprit_ranks(root.to_json(), [f.to_json() for f in rest]) == [0, 3]
    assert all("for rank 0, rank 3" in f.reason for f in rest if f.victim)


def test_dumps_replace_the_logs_rankless_guess_instead_of_listing_it_as_a_consequence():
    """2 ranks, rank 0 alone in a barrier: the logs alone name no rank (no majority); the dumps (the barrier seen
    nowhere earlier) name rank 0, and the logs' rankless guess is not kept as a consequence 'rank —'."""
    two = [timed_out(0, op="barrier", line=31), timed_out(1)]
    root, rest = attribution.blame_the_absent(two[0], two[1:], [], "h")
    assert root.rank is None
    verdict = Findings(root_cause=root, consequences=rest)
    hist = [entry(i) for i in range(1, 4)]
    recs = {0: fr(4, 4, hist + [entry(4, op="barrier", sizes=(), line=31)], ranks="[0, 1]"),
            1: fr(4, 4, hist + [entry(4)], ranks="[0, 1]")}
    attribution.adopt(verdict, dumps_judge.judge_dumps(dumps(recs)))
    assert verdict.root_cause.rank == 0, verdict.root_cause
    assert [f.rank for f in verdict.consequences] == [1], [(f.rank, f.reason) for f in verdict.consequences]
    assert "all_reduce" in verdict.consequences[0].reason and "barrier" not in verdict.consequences[0].reason


def test_an_exception_stays_the_root_cause():
    real = RankFailure(rank=1, local_rank=1, host="h", exit_code=1, category="exception", error_type="ValueError")
    root, rest = attribution.blame_the_absent(real, [timed_out(0)], [], "h")
    assert root is real


def test_advice_never_exceeds_the_users_timeout():
    assert attribution.timeout_s("Timed out waiting 15000ms for recv operation") == 15.0
    assert attribution.timeout_s("WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for") == 600.0
    for t in (2.0, 15.0, 600.0, 3600.0):
        advice = attribution.hang_timeout_advice(t)
        n = int(advice.split("--hang-timeout ")[1].split("`")[0])
        assert 1 <= n < t or t < 2
    assert "--hang-timeout" not in attribution.hang_timeout_advice(None)


def test_pending_deadline_and_the_margin_before_it():
    now = time.time()
    rec = fr(6, 5, [entry(5, created=now - 20), entry(6, created=now - 4, timeout_ms=15000)])
    deadline, timeout = worker_client.pending_deadline(rec)
    assert timeout == 15.0 and abs(deadline - (now + 11)) < 0.01  # only the pending #6 counts
    assert worker_client.pending_deadline(fr(6, 6, [entry(6)])) is None
    dog = Watchdog.__new__(Watchdog)
    dog.poll = 2.0
    from ddpdoctor.forensics.live.early import margin
    assert margin(dog.poll, 15.0) == 5.0 and margin(dog.poll, 4.0) == 2.0  # a poll + 3 s, at most half the timeout


def test_consequences_name_their_own_op():
    hist = [entry(i) for i in range(1, 5)]
    ev = {0: {"fr": fr(5, 4, hist + [entry(5, op="barrier", sizes=(), line=31)])},
          1: {"fr": fr(5, 4, hist + [entry(5)])}, 2: {"fr": fr(5, 4, hist + [entry(5)])}}
    v = collectives.judge(ev)
    assert [c["rank"] for c in v["culprits"]] == [0]
    assert {c["rank"]: c["waited_in"] for c in v["consequences"]} == {1: "all_reduce #5", 2: "all_reduce #5"}
    assert json.dumps(v)  # plain data


FORCED = """W1123 18:58:44.376000 31636 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 31723 closing signal SIGTERM
W1123 18:59:14.377000 31636 torch/distributed/elastic/multiprocessing/api.py:1047] Unable to shutdown process 31723 via 15, forcefully exiting via 9
Failures:
[1]:
  time      : 2026-11-23_18:59:14
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 31723)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 31723
[2]:
  time      : 2026-11-23_18:58:41
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 31724)
  error_file: <N/A>
  traceback : Traceback (most recent call last):
"""


def store_timeout(rank):
    tb = (f'Traceback (most recent call last):\n  File "{USER}", line 4, in <module>\n'
          '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 1899, in init_process_group\n'
          '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 2169, in _new_process_group_helper\n'
          "torch.distributed.DistStoreError: wait timeout after 30000ms, keys: /default_pg/0//cpu//0")
    return from_traceback(rank, tb)


def test_a_rank_torchrun_sigkilled_after_its_sigterm_is_no_oom_but_the_likely_culprit(tmp_path):
    """SIGSTOP on rank 1 (in init_process_group): the others time out, torchrun's SIGTERM cannot end the stopped
    rank, and after 30 s torchrun SIGKILLs it. That SIGKILL is torchrun's, not the OOM killer's."""
    from ddpdoctor.forensics.postmortem import analysis

    recs = analysis.parse_agent_summary(FORCED)
    assert [(r["rank"], r["pid"], r["forced_kill"]) for r in recs] == [(1, 31723, True), (2, 31724, False)]
    killed = analysis.failure_from(recs[0], 0, None)
    assert killed.category == "signal" and killed.victim and "OOM" not in killed.fix and "stopped" in killed.fix
    assert "killed by torchrun" in killed.message
    fails = [store_timeout(0), killed, store_timeout(2)]
    attribution.refine_timeouts(fails)
    root, rest = attribution.blame_the_absent(*attribution.judge(fails), [], "h")
    assert root.rank == 1 and root.message.startswith("likely rank 1") and "ignoring its SIGTERM" in root.message
    assert "init_process_group" in root.message  # the call the user made, not torch's internal helper
    assert "--hang-timeout 15" in root.fix  # the store's "wait timeout after 30000ms" is the user's timeout
    assert sorted(f.rank for f in rest) == [0, 2] and all(f.victim for f in rest)
    # a SIGKILL torchrun did not send stays a SIGKILL from outside (OOM killer, scheduler)
    other = analysis.failure_from({**recs[0], "forced_kill": False}, 0, None)
    assert not other.victim and "OOM" in other.fix


def test_a_rank_whose_script_ended_early_is_named_as_such_with_a_fix_that_helps():
    """Rank 2 called sys.exit(0) after collective 10; ranks 0 and 1 went on into 11 and lost their peer. The
    bootstrap's exit record says rank 2 ended of its own: no 'look at its stack', but where it left and why that
    hangs the others."""
    hist = [entry(i) for i in range(1, 11)]
    ended = {"exit_code": 0, "where": f"{USER}:77"}
    records = {0: fr(11, 11, hist + [entry(11)]), 1: fr(11, 11, hist + [entry(11)]), 2: {**fr(10, 10, hist), "ended": ended}}
    found = {r: (p, fr_dumps.plain_record(rec, str(p))) for r, (p, rec) in dumps(records).items()}
    assert found[2][1]["ended"] == ended and found[0][1]["ended"] is None
    lost = [classify(RankFailure(rank=r, local_rank=r, host="h", exit_code=1, error_type="RuntimeError",
                                 message="[pair.cc:553] Connection closed by peer [127.0.0.1]:7574")) for r in (0, 1)]
    verdict = Findings(root_cause=lost[0], consequences=lost[1:])
    attribution.adopt(verdict, dumps_judge.judge_dumps(found))
    rc = verdict.root_cause
    assert rc.rank == 2 and rc.error_type == "ended_early" and rc.exit_code == 0 and rc.location == f"{USER}:77"
    assert "ended of its own (exit code 0, sys.exit at" in rc.message and "Join" in rc.fix and "stack" not in rc.fix
    assert sorted(f.rank for f in verdict.consequences) == [0, 1]
    # an "ended" field of the wrong shape (a file from anywhere) is ignored
    assert fr_dumps.plain_record({**fr(1, 1, []), "ended": {"exit_code": "x"}}, "f")["ended"] is None
    assert fr_dumps.plain_record({**fr(1, 1, []), "ended": {"exit_code": 1, "where": ["a"]}}, "f")["ended"] == \
        {"exit_code": 1, "where": None}


def peer_lost(rank, line=11):
    tb = (f'Traceback (most recent call last):\n  File "{USER}", line {line}, in <module>\n'
          '  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce\n    work.wait()\n'
          "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:43408")
    return from_traceback(rank, tb)


def test_plain_torchrun_a_rank_that_left_no_record_while_the_others_lost_it_ended_early(tmp_path):
    """Plain torchrun, rank 2 called sys.exit(0): torchrun's table lists ranks 0 and 1 ('Connection closed by
    peer'), the log dir has rank 2's folder with no record. It was named nobody (rank 0, 'nothing to fix on this
    rank: see the root cause', pointing at itself); now rank 2 is the likely one that left early."""
    for r in range(3):
        (tmp_path / str(r)).mkdir()
        (tmp_path / str(r) / "stderr.log").write_text("")
    fails = [peer_lost(0), peer_lost(1)]
    assert all(f.category == "peer_lost" for f in fails)
    root, rest = attribution.blame_the_absent(*judged_with_silent(fails, tmp_path), "h")
    assert root.rank == 2 and root.error_type == "likely_ended_early" and "exit code 0" in root.message
    assert "Join" in root.fix and "see the root cause" not in root.fix
    assert sorted(f.rank for f in rest) == [0, 1] and all(f.victim and "broke when rank 2 left" in f.reason for f in rest)
    assert attribution.culprit_ranks(root.to_json(), [f.to_json() for f in rest]) == [2]
    # without torchrun's table, a rank killed without a trace looks the same: said so
    root, _ = attribution.blame_the_absent(*judged_with_silent([peer_lost(0), peer_lost(1)], tmp_path), "h", listed=False)
    assert root.rank == 2 and "or was killed without a trace" in root.message
    # every rank has a record: nothing to infer, unchanged
    root, _ = attribution.blame_the_absent(*judged_with_silent([peer_lost(0), peer_lost(1), peer_lost(2)], tmp_path), "h")
    assert root.category == "peer_lost"


def test_several_silent_ranks_of_a_log_dir_alone_name_no_rank_and_say_what_tells_them_apart(tmp_path):
    """Issue 37: plain torchrun, 4 ranks, rank 3 SIGKILLed from outside, the log dir alone. Rank 2 lost its peer;
    ranks 0 and 1 (stopped by torchrun's SIGTERM) and 3 (SIGKILL) left no trace. It named rank 0 ('root cause:
    rank 0 ... a hang', culprit_ranks [0]); the log dir cannot tell the three apart: none is named, the three are
    listed, and the message says what would tell them apart."""
    for r in range(4):
        (tmp_path / str(r)).mkdir()
        (tmp_path / str(r) / "stderr.log").write_text("")
    root, rest = attribution.blame_the_absent(*judged_with_silent([peer_lost(2)], tmp_path), "h", listed=False)
    assert root.rank is None and root.error_type == "no_culprit_candidates", root
    assert "rank 0, rank 1, rank 3" in root.message and "--agent-log" in root.message and "flight-recorder" in root.fix
    assert attribution.culprit_ranks(root.to_json(), [f.to_json() for f in rest]) == []
    assert {f.rank for f in rest if "candidate" in (f.reason or "")} == {0, 1, 3}


def test_ranks_torchrun_stopped_after_a_lost_peer_are_not_ranks_that_ended_early(tmp_path):
    """A node of a 2-node job dies: rank 0 loses its peer, torchrun stops ranks 1-3 with its closing signal and
    lists none of them. They left no record because they were stopped, not because they left: rank 0's lost peer
    stays the root cause (the review found them named 'likely ended of its own (exit code 0)')."""
    for r in range(4):
        (tmp_path / str(r)).mkdir()
        (tmp_path / str(r) / "stderr.log").write_text("")
    root, rest = attribution.blame_the_absent(*judged_with_silent([peer_lost(0)], tmp_path), "h", closing_signals=3)
    assert root.category == "peer_lost" and root.rank == 0 and root.error_type != "likely_ended_early"
    # fewer closing signals than silent ranks: one of them did leave early (rank 2 exited 0 before the stop)
    root, _ = attribution.blame_the_absent(*judged_with_silent([peer_lost(0), peer_lost(1)], tmp_path), "h", closing_signals=1)
    assert root.error_type == "likely_ended_early"


def test_the_post_mortem_counts_torchrun_s_closing_signals():
    from ddpdoctor.forensics.postmortem.analysis import CLOSING_SIGNAL

    log = FORCED + "\nW1123 18:58:44.377 1 api.py:1028] Sending process 31724 closing signal SIGTERM\n"
    assert len(CLOSING_SIGNAL.findall(log)) == 2


def test_a_rank_that_exited_with_an_error_code_gets_no_uneven_steps_fix():
    """`except Exception: print(e); sys.exit(1)` on one rank: it ended of its own, but not of uneven steps."""
    f = RankFailure(rank=2, local_rank=2, host="h", exit_code=None, message="missing rank 2")
    attribution.ended_early(f, {"exit_code": 1, "where": "/w/train.py:40"})
    assert f.error_type == "ended_early" and "exit code 1" in f.message and f.location == "/w/train.py:40"
    assert "stderr.log" in f.fix and "Join" not in f.fix
    g = RankFailure(rank=2, local_rank=2, host="h", exit_code=None, message="missing rank 2")
    attribution.ended_early(g, {"exit_code": 0, "where": None})
    assert g.fix == attribution.ENDED_EARLY_FIX


USAGE = ("usage: train.py [-h] [--steps STEPS]\n                [--collective-timeout COLLECTIVE_TIMEOUT]\n"
         "train.py: error: --steps, --batch-size and --grad-accum must be positive\n")


def test_a_script_that_rejects_its_arguments_is_the_root_cause_not_a_collective_timeout():
    """`run-trainer -- --steps -1`: argparse printed its usage (which lists --collective-timeout) and exited 2;
    the verdict read 'hang: every rank timed out inside a collective'."""
    f = classify(RankFailure(rank=0, local_rank=0, host="h", exit_code=2, log_tail=USAGE))
    assert f.category == "exception" and f.error_type == "usage" and not f.victim
    assert f.message == "--steps, --batch-size and --grad-accum must be positive"
    assert f.fix.startswith("train.py rejected its command-line arguments")
    root, rest = attribution.judge([f])
    assert root is f and rest == []
    # a log that only mentions a timeout, without argparse's usage, is still read as one
    other = classify(RankFailure(rank=0, local_rank=0, host="h", exit_code=2,
                                 log_tail="x: error: nothing\nRuntimeError: Timed out waiting 15000ms for recv"))
    assert other.category == "timeout"


def _dump(path, last, pending_created_s=None):
    """A gloo flight record: all_reduce #1..last completed, and #last+1 pending since ``pending_created_s``."""
    import json
    import time

    entries = [{"collective_seq_id": s, "pg_id": 0, "process_group": ["0", "default_pg"],
                "profiling_name": "gloo:all_reduce", "input_sizes": [[4]], "input_dtypes": ["Float"],
                "time_created_ns": int((time.time() - 60) * 1e9), "timeout_ms": 1800000, "frames": [],
                "state": "completed"} for s in range(1, last + 1)]
    done = last
    if pending_created_s is not None:
        entries.append(dict(entries[0], collective_seq_id=last + 1, state="scheduled",
                            time_created_ns=int((time.time() - pending_created_s) * 1e9)))
    path.write_text(json.dumps({"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                                "pg_status": {"0": {"last_enqueued_collective": len(entries),
                                                    "last_completed_collective": done}}, "entries": entries}))


def test_a_hung_job_a_scheduler_stopped_is_no_pass_and_names_the_rank_its_dumps_point_to(tmp_path):
    """Issue 37: SIGTERM to the whole job (SLURM's time limit, scancel) while rank 0 waited 30 s in all_reduce #5
    that rank 1 never entered; no rank failed of its own. It was 'no failed rank', exit 0."""
    from ddpdoctor.forensics.evidence import fr_dumps
    from ddpdoctor.forensics.judge import stopped
    from ddpdoctor.forensics.judge.verdict import Findings

    _dump(tmp_path / "rank_0", 4, pending_created_s=30)
    _dump(tmp_path / "rank_1", 4)
    dumps = fr_dumps.find_dumps([tmp_path])
    assert 29 < fr_dumps.stalled_s(dumps) < 60
    hang = dumps_judge.judge_dumps(dumps, [], None, [0, 1])
    v = Findings(root_cause=None, stopped_by="SIGTERM")
    stopped.stopped_from_outside(v, hang, fr_dumps.stalled_s(dumps), "SIGTERM")
    assert v.root_cause.rank == 1 and v.root_cause.error_type == "stopped_while_hung", v.root_cause
    assert "SIGTERM" in v.root_cause.message and "while hung" in v.root_cause.message
    # no dump: torchrun's own log says it was stopped; no rank named, what would tell is said
    v = Findings(root_cause=None, stopped_by="SIGTERM")
    stopped.stopped_from_outside(v, None, None, "SIGTERM")
    assert v.root_cause.rank is None and v.root_cause.error_type == "stopped_from_outside"
    assert "--fr-dir" in v.root_cause.fix and attribution.culprit_ranks(v.root_cause.to_json(), []) == []
    # run-trainer's own run: not told to rerun under run-trainer, but how its watchdog would have named the rank
    v = Findings(root_cause=None, stopped_by="SIGTERM")
    stopped.stopped_from_outside(v, None, None, "SIGTERM", fix=stopped.STOPPED_FIX_TRAINER)
    assert "--hang-timeout" in v.root_cause.fix and "run-trainer" not in v.root_cause.fix
    # a healthy job's dumps (nothing pending) and no signal: nothing to say
    v = Findings(root_cause=None)
    stopped.stopped_from_outside(v, None, None, None)
    assert v.root_cause is None


def test_torchrun_s_own_words_say_it_was_stopped_from_outside():
    from ddpdoctor.forensics.postmortem.analysis import agent_signal

    assert agent_signal("torch.distributed.elastic.multiprocessing.api.SignalException: Process 16082 got signal: 15"
                        ) == "SIGTERM"
    assert agent_signal("Received Signals.SIGINT death signal, shutting down workers") == "SIGINT"
    # Python 3.11's torchrun (an IntEnum prints as its number): the only line left when the scheduler's SIGKILL ends
    # it while its workers are still stopping (seen under a real SLURM time limit)
    assert agent_signal("W1129 01:14:25.777000 25986 torch/distributed/elastic/agent/server/api.py:753] Received 15 "
                        "death signal, shutting down workers") == "SIGTERM"
    assert agent_signal("ChildFailedError: ...") is None


def test_run_trainer_stopped_by_a_scheduler_while_hung_names_the_rank_its_records_point_to(tmp_path):
    """run-trainer (and its job) got a scheduler's SIGTERM before its hang threshold: the records the ranks wrote
    at the SIGTERM hold rank 0's all_reduce pending 30 s: stopped while hung, rank 1; fresh records: a stop."""
    import signal

    from ddpdoctor.forensics.judge.decide import Context, Evidence, Failures, decide
    from ddpdoctor.forensics.judge.verdict import Findings
    from ddpdoctor.forensics.postmortem import trainer_run

    def stopped():
        findings = Findings(root_cause=None, world=[0, 1])
        judged, stalled, _ = trainer_run.exit_dumps(findings, tmp_path)
        outcome = decide(Evidence(dumps=judged, stalled_s=stalled), Failures(findings=findings),
                         Context("run-trainer", failed=True, interrupted=signal.SIGTERM))
        return outcome.record.root

    folder = tmp_path / "flight_recorder"
    folder.mkdir()
    _dump(folder / "rank0.json", 4, pending_created_s=30)
    _dump(folder / "rank1.json", 4)
    root = stopped()
    assert root and root["rank"] == 1 and root["error_type"] == "stopped_while_hung", root
    _dump(folder / "rank0.json", 4, pending_created_s=1)
    assert stopped()["category"] == "interrupted"  # fresh records: the stop itself, no hang


def test_a_rank_lightning_s_sigterm_handler_interrupted_in_its_own_code_is_the_likely_culprit(tmp_path):
    """Lightning's SIGTERM handler broadcasts the signal (dist.broadcast) from the frame it interrupted: rank 1,
    stuck in its own code, ends 'inside' a broadcast whose peer closed. Under the handler it stood in its own
    code: stopped by the launcher without timing out, the likely culprit at its line (it was 'every rank timed
    out inside a collective', no rank named)."""
    site = "/venv/lib/python3.11/site-packages"
    tb = (f'Traceback (most recent call last):\n  File "{USER}", line 20, in <module>\n'
          '  File "/u/faults.py", line 50, in inject\n    time.sleep(300)\n'
          f'  File "{site}/lightning/pytorch/trainer/connectors/signal_connector.py", line 36, in __call__\n'
          f'  File "{site}/lightning/pytorch/trainer/connectors/signal_connector.py", line 118, in _sigterm_notifier_fn\n'
          f'  File "{site}/torch/distributed/distributed_c10d.py", line 3151, in broadcast\n    work.wait()\n'
          "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:22708")
    waiting = (f'Traceback (most recent call last):\n  File "{USER}", line 48, in <module>\n'
               f'  File "{site}/torch/autograd/graph.py", line 979, in _engine_run_backward\n'
               "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation")
    fails = [from_traceback(0, waiting), from_traceback(1, tb)]
    assert attribution.stopped_in_own_code(fails[1]) and not attribution.stopped_in_own_code(fails[0])
    assert attribution.waited_call(fails[0])[0].startswith("DDP's gradient all_reduce")
    root, rest = attribution.blame_the_absent(*judged_with_silent(fails, tmp_path), "h")
    assert root.rank == 1 and root.location == "/u/faults.py:50", root


def test_the_rank_a_library_names_in_the_exception_it_reraised_everywhere_is_the_root_cause():
    """torch.distributed.checkpoint gathers rank 1's exception and raises it on every rank; rank 0 exits first."""
    from ddpdoctor.forensics.judge.attribution import judge
    from ddpdoctor.forensics.judge.reraised import library_named_ranks

    text = ("torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([1])\n"
            "Traceback (most recent call last): (RANK 1)\n  File \"/job/train.py\", line 9, in plan\n"
            "RuntimeError: corrupt batch at step 6 on rank 1\n")
    first = RankFailure(rank=0, local_rank=0, host="h", exit_code=1, timestamp=1.0, category="exception",
                        message="corrupt batch at step 6 on rank 1", traceback=text)
    second = RankFailure(rank=1, local_rank=1, host="h", exit_code=1, timestamp=2.0, category="exception",
                         message="corrupt batch at step 6 on rank 1", traceback=text)
    assert library_named_ranks(first) == [1]
    root, rest = judge([first, second])
    assert root is second and rest == [first] and "re-raised rank 1" in first.reason
    alone = RankFailure(rank=0, local_rank=0, host="h", exit_code=1, timestamp=1.0, category="exception",
                        message="boom", traceback=text)  # rank 1 left no record of its own: the copy, as rank 1's
    root, rest = judge([alone])
    assert root.rank == 1 and root.host is None and rest == [alone]
    plain = RankFailure(rank=0, local_rank=0, host="h", exit_code=1, category="exception", message="boom")
    assert judge([plain])[0] is plain and library_named_ranks(plain) == []
