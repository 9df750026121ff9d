"""The one judge (forensics/judge) on recorded evidence: the wait-for graph over collectives, send/recv, init and
exits; the mismatch rules; NCCL-shaped dumps; and that no verdict depends on the words of a message."""
from __future__ import annotations

from dataclasses import replace

from ddpdoctor.forensics.evidence.model import RankFailure
from ddpdoctor.forensics.judge.classify import classify
from ddpdoctor.forensics.evidence import flight_recorder, stacks, torchrun_files, worker_server
from ddpdoctor.forensics.evidence.model import (Call, Ending, EndKind, Ender, Frame, Group, JobEvidence, RankState,
                                                Source, Wait, WaitKind, is_library, user_frame)
from ddpdoctor.forensics.judge import Category, NoCulprit, judge
from ddpdoctor.forensics.judge.words import live_line, to_json

USER = "/home/u/pipe.py"
C10D = "/x/site-packages/torch/distributed/distributed_c10d.py"


def entry(seq, op="all_reduce", sizes=((4,),), pg=("0", "default_pg"), pg_id=0):
    return {"collective_seq_id": seq, "pg_id": pg_id, "process_group": list(pg), "profiling_name": f"gloo:{op}",
            "input_sizes": [list(s) for s in sizes], "input_dtypes": ["Float"] * len(sizes), "is_p2p": False,
            "frames": []}


def fr(enqueued, completed, entries):
    return {"pg_status": {"0": {"last_enqueued_collective": enqueued, "last_completed_collective": completed}},
            "entries": entries}


def stack(*frames):
    """faulthandler's dump of the main thread, innermost first: (file, line, function)."""
    body = "".join(f'  File "{f}", line {n} in {fn}\n' for f, n, fn in frames)
    return ("Current thread 0x00007f6cb633c6c0 (most recent call first):\n  <no Python frame>\n\n"
            f"Thread 0x00007f6cd6c36b80 (most recent call first):\n{body}  File \"{USER}\", line 90 in <module>\n")


def rank(fr_doc, stack_text, host="n0"):
    return {"host": host, "pid": 100, "state": "running", "fr": fr_doc, "stacks": stack_text}


HIST = [entry(i) for i in range(1, 6)]
IN_ALL_REDUCE = stack((C10D, 3252, "all_reduce"), (USER, 60, "main"))
IN_RECV = stack((C10D, 2790, "recv"), (USER, 41, "stage"), (USER, 60, "main"))
COMPUTING = stack((USER, 33, "compute"), (USER, 44, "stage"), (USER, 60, "main"))


def test_one_library_rule_and_one_innermost_user_frame():
    frames = (Frame(C10D, 1, "recv"), Frame("/work/ddpdoctor/launch/bootstrap.py", 2, "run"), Frame(USER, 3, "f"))
    assert is_library(C10D) and is_library("<frozen runpy>") and not is_library(USER)
    assert user_frame(frames) == Frame(USER, 3, "f") and user_frame(frames[:2]) is None


def test_pipeline_stage_stuck_before_its_send_is_named_not_the_rank_waiting_in_the_next_all_reduce():
    """0->1->2->3, then a world all_reduce: ranks 0-1 wait in it, rank 3 in recv (its peer unknown without
    py-spy), rank 2 computes. The waits lead to rank 2, with the line it stands on."""
    ev = {0: rank(fr(6, 5, HIST + [entry(6)]), IN_ALL_REDUCE), 1: rank(fr(6, 5, HIST + [entry(6)]), IN_ALL_REDUCE),
          2: rank(fr(5, 5, HIST), COMPUTING), 3: rank(fr(5, 5, HIST), IN_RECV)}
    job = worker_server.job(ev)
    v = judge(job)
    assert v.category == Category.MISSING_RANK and v.culprit_ranks == [2] and v.culprits[0].named
    assert v.culprits[0].where == Frame(USER, 33, "compute")
    doc = to_json(v, job)
    assert doc["waits"]["3"]["kind"] == "recv" and doc["culprits"][0]["where"] == f"{USER}:33"
    assert "rank 2" in live_line(doc) and "rank 3" not in live_line(doc).split(" for ", 1)[1]


def test_a_recv_waits_for_its_peer_from_py_spy_locals():
    recv = (Frame(C10D, 2790, "recv", (("src", "2"), ("tensor", "tensor([...])"))), Frame(USER, 41, "stage"),
            Frame(USER, 90, "<module>"))
    job = JobEvidence(live=True, world=(0, 1, 2, 3))
    job.add(RankState(3, Source.PY_SPY, frames=recv, wait=stacks.wait_of(recv)))
    job.add(RankState(2, Source.PY_SPY, frames=(Frame(USER, 33, "compute"), Frame(USER, 90, "<module>")),
                      wait=Wait(WaitKind.NONE)))
    v = judge(job)
    assert job.ranks[3].wait.peer == 2 and v.category == Category.MISSING_PEER and v.culprit_ranks == [2]


def test_two_ranks_receiving_from_each_other_is_a_cycle_and_names_no_culprit():
    job = JobEvidence(live=True, world=(0, 1))
    for r in (0, 1):
        job.add(RankState(r, Source.PY_SPY, wait=Wait(WaitKind.RECV, peer=1 - r)))
    v = judge(job)
    assert v.culprits == [] and v.no_culprit == NoCulprit.CYCLE
    assert "no culprit named" in to_json(v, job)["summary"]


STORE_ERROR = "torch.distributed.DistStoreError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2"
INIT_TB = ("Traceback (most recent call last):\n"
           '  File "/tmp/noinit.py", line 5, in <module>\n    dist.init_process_group("gloo")\n'
           f'  File "{C10D}", line 1899, in init_process_group\n    default_pg, _ = _new_process_group_helper(\n'
           f'  File "{C10D}", line 2169, in _new_process_group_helper\n    backend_class = ProcessGroupGloo(\n'
           + STORE_ERROR)


def init_failures(message=STORE_ERROR):
    waiting = [classify(RankFailure(rank=r, local_rank=r, host="h", exit_code=1, traceback=INIT_TB.replace(
        STORE_ERROR, message), message=message)) for r in (0, 1, 3)]
    stopped = classify(RankFailure(rank=2, local_rank=2, host="h", exit_code=-15))
    return waiting + [stopped]


def test_a_rank_that_never_reached_init_process_group_is_named_by_the_store_keys():
    """Recorded on torch 2.13 + gloo: ranks 0, 1, 3 time out in init_process_group waiting for key .../2."""
    job = torchrun_files.job_after(init_failures(), world=[0, 1, 2, 3])
    assert job.ranks[0].wait.kind == WaitKind.INIT and job.ranks[0].wait.awaited == (2,)
    v = judge(job)
    assert v.category == Category.NEVER_INITIALIZED and v.culprit_ranks == [2] and v.culprits[0].named
    assert sorted(c.rank for c in v.consequences) == [0, 1, 3]


def test_rewording_every_message_changes_no_culprit():
    """The judge reads typed fields only: the same evidence with every message and reason reworded (the store
    keys kept, they are data) names the same ranks, category and consequences."""
    def judged(failures):
        v = judge(torchrun_files.job_after(failures, world=[0, 1, 2, 3]))
        return v.category, v.culprit_ranks, [c.rank for c in v.consequences]

    plain = init_failures()
    reworded = init_failures("Zeitüberschreitung beim Warten, keys: /default_pg/0//cpu//0/2")
    for f in reworded:
        f.reason, f.fix = "anders formuliert", "anders"
    assert judged(plain) == judged(reworded)
    ev = {0: rank(fr(6, 5, HIST + [entry(6)]), IN_ALL_REDUCE), 1: rank(fr(5, 5, HIST), COMPUTING)}
    base = worker_server.job(ev)
    words = JobEvidence(live=True, ranks={r: replace(s, ending=Ending(EndKind.RUNNING, message="ganz andere Worte"))
                                          for r, s in base.ranks.items()})
    assert judge(base).culprit_ranks == judge(words).culprit_ranks == [1]


def test_the_rank_the_backend_aborted_is_never_the_culprit_for_being_aborted():
    """Rank 3 received a message of another size (gloo aborted it); with nothing else known, no rank is named."""
    job = JobEvidence(live=False, world=(0, 1, 2, 3))
    job.add(RankState(3, Source.ERROR_FILE, ending=Ending(EndKind.SIGNALLED, signal="SIGABRT", by=Ender.BACKEND),
                      wait=Wait(WaitKind.RECV)))
    assert 3 not in judge(job).culprit_ranks


def test_the_receiver_gloo_aborted_in_recv_is_not_the_odd_one_of_the_next_collective():
    """A pipeline's after-exit dumps: rank 2 sent a wrong size, gloo aborted rank 3 inside its recv (no dump);
    ranks 0-2 then waited in the world all_reduce #5, which rank 3 never entered. Rank 3 stood in a recv, not in
    a collective of its own: it is no likely odd caller of #5 (it was named so by the benchmark's dumps run)."""
    job = JobEvidence(live=False, world=(0, 1, 2, 3))
    for r in range(3):
        job.add(flight_recorder.rank_state(r, fr(5, 4, [entry(i) for i in range(1, 6)])))
    job.add(RankState(3, Source.ERROR_FILE, ending=Ending(EndKind.SIGNALLED, signal="SIGABRT", by=Ender.BACKEND),
                      wait=Wait(WaitKind.RECV, site=Frame(USER, 41, "stage")), frames=(Frame(USER, 41, "stage"),)))
    v = judge(job)
    assert 3 not in v.culprit_ranks, v
    # the same rank aborted inside the collective itself (a dtype or size mismatch of all_reduce #5) stays the
    # likely odd one: the three with a record agree
    job.ranks[3] = replace(job.ranks[3], wait=Wait(WaitKind.COLLECTIVE))
    assert judge(job).culprit_ranks == [3]
    # but aborted inside an all_to_all, it only received another rank's uneven part (MoE splits): not named
    job.ranks[3] = replace(job.ranks[3], wait=Wait(WaitKind.COLLECTIVE, call=Call(Group("0"), "all_to_all_single")))
    assert 3 not in judge(job).culprit_ranks


def test_a_wrongly_shaped_send_is_named_by_the_pipeline_s_other_transfers():
    """2 sends [4, 8] to 3, which posted [4, 4] like every other transfer of the job: rank 2's send is odd."""
    job = JobEvidence(live=False, world=(0, 1, 2, 3))
    g = Group("0")
    shapes = {0: [("send", 1, (4, 4))], 1: [("recv", 0, (4, 4)), ("send", 2, (4, 4))],
              2: [("recv", 1, (4, 4)), ("send", 3, (4, 8))], 3: [("recv", 2, (4, 4))]}
    for r, ops in shapes.items():
        calls = tuple(Call(g, op, peer=p, input_sizes=(s,), dtypes=("Float",), site=Frame(USER, 50 + r, "stage"))
                      for op, p, s in ops)
        ending = Ending(EndKind.SIGNALLED, signal="SIGABRT", by=Ender.BACKEND) if r == 3 else None
        job.add(RankState(r, Source.FLIGHT_RECORDER, calls=calls, ending=ending))
    v = judge(job)
    assert v.category == Category.DESYNC and v.culprit_ranks == [2] and v.culprits[0].where == Frame(USER, 52, "stage")


def test_subgroups_are_matched_by_name_not_by_each_rank_s_pg_id():
    """TP x DP after the timeout: pairs [0, 1] (group "1") and [2, 3] (group "2"), both pg_id 1 locally; rank 3
    never entered its pair's all_reduce, so rank 2 waited in it and ranks 0-1 in the world's."""
    def doc(r, pair_seq, world_seq):
        name = "1" if r < 2 else "2"
        es = [entry(s, pg=(name, "undefined"), pg_id=1) for s in range(1, pair_seq + 1)]
        es += [entry(s) for s in range(1, world_seq + 1)]
        return {"pg_status": {"0": {"last_completed_collective": world_seq}, "1": {"last_completed_collective": pair_seq}},
                "entries": es}

    job = JobEvidence(live=False, world=(0, 1, 2, 3))
    for r, (p, w) in {0: (6, 6), 1: (6, 6), 2: (6, 5), 3: (5, 5)}.items():
        job.add(flight_recorder.rank_state(r, doc(r, p, w)))
    v = judge(job)
    assert v.culprit_ranks == [3] and v.call.group.name == "2" and v.via == [2]


def test_a_rank_that_ended_of_its_own_is_named_ended_early():
    job = JobEvidence(live=False)
    job.add(flight_recorder.rank_state(0, fr(6, 6, HIST + [entry(6)])))
    job.add(flight_recorder.rank_state(1, {**fr(5, 5, HIST), "ended": {"exit_code": 0, "where": f"{USER}:70"}}))
    v = judge(job)
    assert v.category == Category.ENDED_EARLY and v.culprit_ranks == [1]
    assert to_json(v, job)["culprits"][0]["ended"] == {"exit_code": 0, "where": f"{USER}:70"}


def test_nccl_shaped_dumps_go_through_the_same_model():
    """An NCCL dump (torch's pickled `nccl_trace_rank_<R>` as a dict): state per entry, frames with the call
    site, p2p entries with their own sequence ids, pg_config with the members."""
    def nccl(r, last):
        es = [{"record_id": s, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": s,
               "p2p_seq_id": 0, "op_id": s, "profiling_name": "nccl:all_reduce", "time_created_ns": 1,
               "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
               "output_dtypes": ["Float"], "state": "completed" if s < last or r == 1 else "scheduled",
               "timeout_ms": 600000, "is_p2p": False,
               "frames": [{"name": "train_step", "filename": USER, "line": 77}]} for s in range(1, last + 1)]
        return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
                "pg_status": {"0": {"last_enqueued_collective": last, "last_completed_collective": -1}}, "entries": es}

    job = JobEvidence(live=False)
    job.add(flight_recorder.rank_state(0, nccl(0, 9)))
    job.add(flight_recorder.rank_state(1, nccl(1, 8)))
    v = judge(job)
    assert job.expected() == [0, 1, 2] and job.ranks[0].groups[0].ranks == (0, 1, 2)
    assert v.category == Category.MISSING_RANK and v.culprit_ranks == [1, 2]
    assert v.no_evidence == [2] and v.call.site == Frame(USER, 77, "train_step")


def test_all_to_all_splits_are_compared_pairwise_and_the_odd_sender_named():
    """MoE dispatch, 4 ranks, 2 tokens per expert: rank 1 sends 3 to rank 0 (input splits [3, 2, 2, 2]); every
    rank expects 2 from each. Each rank's call with its splits (as py-spy's locals of all_to_all_single show
    them); rank 0 and rank 1 mismatch pairwise, rank 0's column names rank 1 (the others send it 2)."""
    job = JobEvidence(live=False, world=(0, 1, 2, 3))
    for r in range(4):
        ins = (3, 2, 2, 2) if r == 1 else (2, 2, 2, 2)
        call = Call(Group("0"), "all_to_all_single", input_sizes=((sum(ins),),), output_sizes=((8,),),
                    dtypes=("torch.float32",), splits=(ins, (2, 2, 2, 2)), site=Frame(USER, 40 + r, "?"))
        job.add(RankState(r, Source.PY_SPY, calls=(call,)))
    job.add(RankState(0, Source.ERROR_FILE, ending=Ending(EndKind.SIGNALLED, signal="SIGABRT", by=Ender.BACKEND)))
    v = judge(job)
    assert v.category == Category.DESYNC and v.mismatch == "splits" and v.culprit_ranks == [1]
    assert v.culprits[0].where == Frame(USER, 41, "?")


def test_gloo_pipeline_counters_run_ahead_of_the_entries_and_the_stack_places_the_rank():
    """Recorded on torch 2.13 + gloo (pipeline.py stuck): pg_status counts each send/recv, the entries only the
    all_reduces, so ranks 0-1 (inside all_reduce #4) show no entry above last_completed_collective. Their stacks
    stand in all_reduce and the group has ops pending: they are inside their newest entry."""
    def doc(enq, comp, last):
        return {"pg_status": {"0": {"last_enqueued_collective": str(enq), "last_completed_collective": str(comp)}},
                "entries": [entry(s) for s in range(1, last + 1)]}

    ev = {0: rank(doc(8, 6, 4), IN_ALL_REDUCE), 1: rank(doc(12, 9, 4), IN_ALL_REDUCE),
          2: rank(doc(9, 9, 3), COMPUTING), 3: rank(doc(6, 6, 3), IN_RECV)}
    v = judge(worker_server.job(ev))
    assert v.category == Category.MISSING_RANK and v.culprit_ranks == [2] and v.call.seq == 4 and v.waiting == [0, 1]
    assert v.culprits[0].where == Frame(USER, 33, "compute") and v.via == [3]


def test_which_ranks_a_post_mortem_names_does_not_read_its_reasons():
    """attribution.culprit_ranks reads the typed `named` flag: the rank gloo aborted is shown, not named, and a
    culprit beside the root cause is named, whatever their reasons say."""
    from ddpdoctor.forensics.judge import attribution

    aborted = classify(RankFailure(rank=1, local_rank=1, host="h", exit_code=-6, category="desync",
                                   message="Received data size doesn't match expected size"))
    root, rest = attribution.blame_the_absent(aborted, [], None, "h")
    assert root.named is False
    also = RankFailure(rank=3, local_rank=3, host="h", exit_code=None, named=True, reason="culprit too")
    docs = [root.to_json(), also.to_json()]
    before = attribution.culprit_ranks(docs[0], docs[1:])
    for d in docs:
        d["reason"] = "ganz anders formuliert"
    assert before == attribution.culprit_ranks(docs[0], docs[1:]) == [3]


def test_a_1f1b_middle_stage_in_its_own_code_is_named_live_though_no_stack_names_a_peer():
    """A 3-stage 1F1B pipeline, live: ranks 0 and 2 stand in recv (faulthandler's stacks: no locals, no peer),
    rank 1 in its own backward compute. A recv whose peer no source names waits for the ranks that wait in
    nothing: rank 1, the culprit at its line; 0 and 2 are its consequences."""
    from ddpdoctor.forensics.live import collectives

    recv = stack((C10D, 2400, "recv"), (USER, 41, "main"))
    own = stack((USER, 27, "backward_stage"), (USER, 46, "main"))
    fr_doc = fr(30, 30, [entry(i) for i in range(1, 4)])
    evidence = {0: rank(fr_doc, recv), 1: rank(fr_doc, own), 2: rank(fr_doc, recv)}
    doc = collectives.judge(evidence)
    assert [c["rank"] for c in doc["culprits"]] == [1], doc
    assert doc["culprits"][0]["where"] == f"{USER}:27", doc
    assert sorted(c["rank"] for c in doc["consequences"]) == [0, 2], doc
    # every rank in recv with no peer named (a schedule's deadlock): nobody to lead to, no culprit named
    assert collectives.judge({0: rank(fr_doc, recv), 2: rank(fr_doc, recv)})["culprits"] == []


def test_every_rank_inside_init_process_group_is_a_rendezvous_that_never_completes_not_a_missing_rank():
    """torch's restart can leave every rank of the new attempt inside init_process_group: nobody is missing, so
    no rank is named and the fix is not "the culprit never reached init_process_group"."""
    init = stack(("/x/site-packages/torch/distributed/distributed_c10d.py", 1700, "init_process_group"),
                 (USER, 3, "<module>"))
    doc = to_json(*_judged({0: rank(None, init), 1: rank(None, init)}))
    assert doc["category"] == "stuck_init" and doc["culprits"] == [] and doc["no_culprit"] == "everyone", doc
    assert "none is missing" in doc["summary"] and "never reached" not in doc["fix"], doc
    # one rank not there yet: the others wait for it, it is named
    missing = to_json(*_judged({0: rank(None, init), 1: rank(None, stack((USER, 9, "load_data")))}))
    assert missing["category"] == "never_initialized" and [c["rank"] for c in missing["culprits"]] == [1], missing


def _judged(evidence):
    job = worker_server.job(evidence)
    return judge(job), job


def test_a_wait_no_record_places_leads_to_the_rank_killed_not_to_the_ranks_the_launcher_stopped_after_it():
    """TP x DP, plain torchrun, rank 1 SIGKILLed from outside: ranks 0 and 3 broke inside library waits no record
    places; rank 2 was stopped by torchrun's SIGTERM after the kill, without a trace. The waits lead to rank 1
    only (bench_diagnosis tp-dp-kill named rank 2 beside it)."""
    job = JobEvidence(live=False, world=(0, 1, 2, 3))
    for r in (0, 3):
        job.add(RankState(r, Source.ERROR_FILE, wait=Wait(WaitKind.COLLECTIVE, call=Call(Group("0"), "wait_tensor")),
                          ending=Ending(EndKind.EXCEPTION, by=Ender.PEER_LOSS)))
    job.add(RankState(1, Source.AGENT_LOG, ending=Ending(EndKind.SIGNALLED, signal="SIGKILL", by=Ender.OUTSIDE)))
    job.add(RankState(2, Source.AGENT_LOG, ending=Ending(EndKind.SIGNALLED, signal="SIGTERM", by=Ender.LAUNCHER)))
    v = judge(job)
    assert v.culprit_ranks == [1] and v.category == Category.KILLED, v


def test_ranks_waiting_in_send_recv_with_no_sizes_anywhere_say_so_once_in_the_verdict():
    """Issue 54 item 5: gloo records no send/recv, so where the ranks wait in them and no record or kept call holds
    the sizes, a wrong-sized message cannot be told from a missing one: the verdict says it, once (sizes.unjudged
    was written but called nowhere)."""
    job = JobEvidence(live=True, world=(0, 1, 2))
    job.add(RankState(0, Source.PY_SPY, wait=Wait(WaitKind.RECV, peer=1)))
    job.add(RankState(1, Source.PY_SPY, wait=Wait(WaitKind.RECV, peer=2)))
    job.add(RankState(2, Source.PY_SPY, frames=(Frame(USER, 33, "compute"),), wait=Wait(WaitKind.NONE)))
    doc = to_json(judge(job), job)
    assert [n for n in doc.get("notes", []) if "send/recv sizes are in no record" in n] == doc["notes"], doc
    assert len(doc["notes"]) == 1
    from ddpdoctor.report.console_trainer import hang_rows
    assert any("send/recv sizes are in no record" in row.plain for row in hang_rows({"verdict": doc}))
    collective = JobEvidence(live=True, world=(0, 1))
    collective.add(RankState(0, Source.PY_SPY, wait=Wait(WaitKind.COLLECTIVE)))
    assert "notes" not in to_json(judge(collective), collective)  # no send/recv waited in: nothing to say
