"""Unit tests of ddpdoctor/forensics/evidence/flight_recorder.py's reading of NCCL's point-to-point entries and
entry states, judged through judge/dumps.py as postmortem does.

The entries are those of torch's own writer: every field name and value shape is copied from the real gloo dump
in data/fr_gloo_2.13/ (torch 2.13.0's ``_dump_fr_trace_json``), changed only where NCCL writes otherwise, as torch's
own reader of NCCL dumps says: ``profiling_name`` "nccl:send 1->2" / "nccl:recv 3<-0" (group ranks src->dst,
dst<-src), ``is_p2p`` with ``p2p_seq_id`` (torch/distributed/flight_recorder/components/types.py, class ``Op``:
its docstring and ``__init__``), a batch's entries sharing one ``p2p_seq_id`` and ending in "nccl:coalesced"
(components/utils.py ``find_coalesced_group``), ``state`` completed / started / scheduled (types.py
``EntryState``: ``entry["state"]``); torch 2.15's fr_trace writes an any-source receive "recv N<-?"."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from ddpdoctor.forensics.evidence import flight_recorder as fr_mod
from ddpdoctor.forensics.evidence.model import WaitKind
from ddpdoctor.forensics.judge import dumps as dumps_judge
from ddpdoctor.forensics.judge.verdict import Category

DATA = Path(__file__).parents[1] / "data" / "fr_gloo_2.13"
TEMPLATE = json.loads((DATA / "rank0.json").read_text())["entries"][0]  # gloo:all_reduce #1, torch's fields
T0 = TEMPLATE["time_created_ns"]


def nccl(name, *, p2p_seq=0, seq=0, state="completed", sizes=(4,), t=0, pg=0):
    e = copy.deepcopy(TEMPLATE)
    p2p = " " in name
    e.update(profiling_name=f"nccl:{name}", is_p2p=p2p, p2p_seq_id=p2p_seq, collective_seq_id=seq, pg_id=pg,
             state=state, input_sizes=[list(sizes)], output_sizes=[list(sizes)], time_created_ns=T0 + t,
             time_discovered_started_ns=T0 + t if state != "scheduled" else 0,
             time_discovered_completed_ns=T0 + t + 1000 if state == "completed" else 0, retired=state == "completed")
    return e


def record(entries, completed=0):
    return {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": completed, "last_started_collective": completed,
                                "last_completed_collective": completed}},
            "entries": entries, "comm_lib_version": "2.27.5", "nccl_comm_state": {}}


def dumps(records):
    return {r: (Path(f"nccl_trace_rank_{r}"), fr) for r, fr in records.items()}


def test_send_and_recv_entries_keep_their_peer_as_a_global_rank():
    fr = record([nccl("send 0->1", p2p_seq=1), nccl("recv 1<-0", p2p_seq=2), nccl("recv 1<-?", p2p_seq=3)])
    fr["pg_config"]["0"]["ranks"] = "[4, 9]"  # a group of global ranks 4 and 9
    calls = fr_mod.calls_of(fr)
    assert [(c.op, c.peer, c.seq) for c in calls] == [("send", 9, None), ("recv", 4, None), ("recv", None, None)]
    assert fr_mod.p2p_of("nccl2:all_reduce", calls[0].group) == ("all_reduce", None)


def test_a_pipeline_hang_whose_records_hold_only_p2p_names_the_rank_that_never_received():
    # rank 0's third send to rank 1 started and never completed; rank 1 received two and waits in nothing
    r0 = record([nccl("send 0->1", p2p_seq=k, t=k) for k in (1, 2)] + [nccl("send 0->1", p2p_seq=3, state="started",
                                                                            t=3)])
    r1 = record([nccl("recv 1<-0", p2p_seq=k, t=k) for k in (1, 2)])
    assert fr_mod.rank_state(0, r0).wait.kind == WaitKind.SEND
    hang = dumps_judge.judge_dumps(dumps({0: r0, 1: r1}))
    assert hang.category == Category.MISSING_PEER and hang.verdict.culprit_ranks == [1], hang.to_json()


def test_a_batch_waits_in_its_receive():
    batch = [nccl("send 0->1", p2p_seq=5, state="started"), nccl("recv 0<-1", p2p_seq=5, state="started"),
             nccl("coalesced", seq=0, p2p_seq=5, state="started")]
    wait = fr_mod.rank_state(0, record(batch)).wait
    assert wait.kind == WaitKind.P2P and wait.peer == 1 and wait.call.op == "recv"


def test_a_p2p_size_mismatch_names_the_end_no_other_transfer_agrees_with():
    good = [nccl("send 0->1", p2p_seq=k, t=k) for k in (1, 2)]
    r0 = record(good + [nccl("send 0->1", p2p_seq=3, sizes=(3,), state="started", t=3)])  # 3 where 4 always went
    r1 = record([nccl("recv 1<-0", p2p_seq=k, t=k) for k in (1, 2)]
                + [nccl("recv 1<-0", p2p_seq=3, state="started", t=3)])
    hang = dumps_judge.judge_dumps(dumps({0: r0, 1: r1}))
    assert hang.category == Category.DESYNC and hang.verdict.culprit_ranks == [0], hang.to_json()
    assert hang.verdict.mismatch == "sizes" and "p2p_majority" in hang.verdict.evidence


def test_gloo_status_counts_op_ids_so_a_collective_after_sends_is_still_pending():
    fr = json.loads((DATA / "rank0.json").read_text())  # torch 2.13's real record: last_completed 7 = an op id
    assert fr_mod.status_numbers(fr) == {"0": "op_id"}
    assert all(c.completed for c in fr_mod.calls_of(fr))
    fr["entries"].append(dict(fr["entries"][-1], collective_seq_id=5, op_id=9))  # after two unrecorded sends
    fr["pg_status"]["0"]["last_enqueued_collective"] = "9"
    assert not fr_mod.calls_of(fr)[-1].completed  # read as collective ids, 5 <= 7 would say completed
