"""Unit tests of ddpdoctor/forensics/judge/sizes.py's rules on the sizes every rank's flight recorder keeps (any
Python: no size watch): an all_to_all that cannot add up (a MoE router's odd splits on one rank), and a completed
collective whose members passed other sizes (an uneven broadcast the backend let by).

Entries are torch's own: each is a copy of an entry of the real dumps in data/fr_gloo_2.13/ (torch 2.13.0's
``_dump_fr_trace_json``: gloo records all_to_all_single with its tensors' ``input_sizes``/``output_sizes``, not
its splits), changed only in its sequence ids, sizes and time."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from ddpdoctor.forensics.judge import dumps as dumps_judge
from ddpdoctor.forensics.judge.verdict import Category

DATA = Path(__file__).parents[1] / "data" / "fr_gloo_2.13"
REAL = json.loads((DATA / "rank0.json").read_text())
ALL_REDUCE, ALL_TO_ALL, BROADCAST = (next(e for e in REAL["entries"] if e["profiling_name"] == f"gloo:{op}")
                                     for op in ("all_reduce", "all_to_all", "broadcast"))
WORLD = 3
PER = 2  # tokens each rank expects from every rank (moe.py's PER_EXPERT)


def entry(template, seq, put, took):
    e = copy.deepcopy(template)
    e.update(collective_seq_id=seq, op_id=seq, record_id=seq - 1, input_sizes=[[put]], output_sizes=[[took]],
             time_created_ns=template["time_created_ns"] + seq * 1_000_000)
    return e


def moe_record(rank, steps, odd=None, router=None):
    """One rank's record of a MoE loop as tests/integration/shape_jobs/moe.py runs it: per step an all_to_all
    (what it routes: ``router(rank, step)`` tokens, else PER x WORLD; rank ``odd`` = (rank, step) one more), then
    the loss' all_reduce."""
    entries = []
    for step in range(steps):
        put = router(rank, step) if router else PER * WORLD
        if odd == (rank, step):
            put += 1
        took = router(("in", rank), step) if router else PER * WORLD
        entries += [entry(ALL_TO_ALL, 2 * step + 1, put, took), entry(ALL_REDUCE, 2 * step + 2, 1, 1)]
    fr = copy.deepcopy(REAL)
    fr["entries"] = entries
    fr["pg_config"][""]["ranks"] = json.dumps(list(range(WORLD)))
    last = str(len(entries))
    fr["pg_status"]["0"].update(last_enqueued_collective=last, last_completed_collective=last)
    return fr


def dumps(records):
    return {r: (Path(f"rank{r}.json"), fr) for r, fr in records.items()}


def test_odd_all_to_all_splits_are_named_from_the_records_on_any_python():
    records = {r: moe_record(r, 4, odd=(1, 3)) for r in range(WORLD)}
    hang = dumps_judge.judge_dumps(dumps(records))
    assert hang.category == Category.DESYNC and hang.verdict.culprit_ranks == [1], hang.to_json()
    assert hang.verdict.mismatch == "splits" and "a2a_totals_changed" in hang.verdict.evidence


def test_the_odd_rank_is_named_when_the_rank_gloo_aborted_left_no_dump():
    records = {r: moe_record(r, 4, odd=(1, 3)) for r in (1, 2)}  # rank 0 (the receiver gloo aborted): no dump
    hang = dumps_judge.judge_dumps(dumps(records), world=[0, 1, 2])
    assert hang.verdict.culprit_ranks == [1] and "a2a_input_changed" in hang.verdict.evidence, hang.to_json()


def test_an_uneven_router_that_adds_up_is_no_mismatch():
    def router(who, step):  # every rank routes another number of tokens each step; what comes in adds up
        return 6 + ((hash(who) + step) % 3 if not isinstance(who, tuple) else 0)
    records = {r: moe_record(r, 4) for r in range(WORLD)}
    for r, fr in records.items():  # rank r puts 5 + r + step, takes what the three put on average: totals agree
        for step in range(4):
            fr["entries"][2 * step]["input_sizes"] = [[5 + r + step]]
            fr["entries"][2 * step]["output_sizes"] = [[6 + step]]
    hang = dumps_judge.judge_dumps(dumps(records))
    assert hang is None or hang.category != Category.DESYNC, hang.to_json()


def test_a_completed_broadcast_of_other_sizes_is_named():
    records = {}
    for r in range(WORLD):
        fr = moe_record(r, 3)
        fr["entries"][3] = entry(BROADCAST, 4, 5 if r == 2 else 4, 5 if r == 2 else 4)  # step 1's, then step 2
        records[r] = fr
    hang = dumps_judge.judge_dumps(dumps(records))
    assert hang.category == Category.DESYNC and hang.verdict.culprit_ranks == [2], hang.to_json()
    assert hang.verdict.mismatch == "sizes" and "record_sizes_majority" in hang.verdict.evidence
