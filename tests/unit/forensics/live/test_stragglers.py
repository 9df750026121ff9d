"""stragglers.py: a rank persistently slower in its own code is named once, with its figures; jitter, a
healthy job, a single slow collective and too few collectives name nobody."""
from __future__ import annotations

import json
import random

from ddpdoctor.forensics.live import stragglers
from ddpdoctor.forensics.live.stragglers import Live, judge


def records(n, own, jitter=0.0, seed=1, spikes=None, start=0.0):
    """Flight records of ranks doing `own[r]` seconds of their own code before each of n all_reduces."""
    rng = random.Random(seed)
    t = start
    entries = {r: [] for r in own}
    for seq in range(n):
        entered = {r: t + own[r] + rng.uniform(0, jitter) + (spikes or {}).get((r, seq), 0.0) for r in own}
        for r, at in entered.items():
            entries[r].append({"collective_seq_id": seq, "process_group": ["0", ""], "time_created_ns": int(at * 1e9),
                               "profiling_name": "gloo:all_reduce"})
        t = max(entered.values()) + 0.001  # it completes once the last rank came
    return {r: {"entries": e, "pg_status": {"0": {"last_completed_collective": n}}} for r, e in entries.items()}


def created(frs):
    out = {}
    for r, fr in frs.items():
        for key, t in stragglers._created(fr).items():
            out.setdefault(key, {})[r] = t
    return out


def test_a_rank_five_times_slower_in_its_own_code_is_named_with_its_figures():
    s = judge(created(records(30, {0: 0.1, 1: 0.5, 2: 0.1}, jitter=0.01)), [0, 1, 2])
    assert s is not None and s.rank == 1, s
    assert 4.0 <= s.slower_x <= 6.0 and abs(s.own_s - 0.5) < 0.05 and abs(s.others_own_s - 0.1) < 0.05, s
    assert abs(s.others_wait_s - 0.4) < 0.05 and s.wait_s < 0.02 and s.last_share > 0.9 and s.late_s > 0.35, s
    json.dumps(s.to_json(), allow_nan=False)


def test_jitter_a_healthy_job_and_one_slow_collective_name_nobody():
    for seed in range(50):  # a loaded machine: up to 80 ms of scheduling delay on any rank, any collective
        assert judge(created(records(40, {0: 0.05, 1: 0.05}, jitter=0.08, seed=seed)), [0, 1]) is None, seed
    spikes = {(1, 20): 2.0}  # one 2 s pause (a checkpoint, a GC) on rank 1
    assert judge(created(records(40, {0: 0.1, 1: 0.1}, jitter=0.01, spikes=spikes)), [0, 1]) is None
    assert judge(created(records(5, {0: 0.1, 1: 0.5})), [0, 1]) is None  # too few collectives
    assert judge(created(records(30, {0: 0.001, 1: 0.02})), [0, 1]) is None  # 20x, but 19 ms: under the floor
    assert judge(created(records(30, {0: 0.1})), [0]) is None


def test_live_names_once_after_several_polls_and_says_it():
    said = []
    live = Live(say=said.append)
    live.restart(0.0)
    full = records(60, {0: 0.1, 1: 0.5})
    named = []
    for upto in range(12, 61, 4):  # each poll sees more collectives
        frs = {r: dict(fr, entries=fr["entries"][:upto]) for r, fr in full.items()}
        named.append(live.observe(frs, float(upto)))
    hits = [s for s in named if s]
    assert len(hits) == 1 and hits[0].rank == 1 and len(said) == 1, said
    assert named.index(hits[0]) == stragglers.PERSIST - 1  # not on the first poll that sees it
    line = said[0]
    assert "rank 1" in line and "slower" in line and "its own code" in line and "wait" in line, line
    assert live.to_json()[0]["rank"] == 1 and live.to_json()[0]["attempt"] == 0
    frs = {r: dict(fr, entries=fr["entries"][:12]) for r, fr in full.items()}
    assert live.observe(frs, 70.0) is None  # no new collective: nothing judged


def test_a_restart_starts_over_and_counts_the_attempt():
    live = Live()
    live.restart(0.0)
    full = records(40, {0: 0.1, 1: 0.5})
    for upto in range(12, 41, 4):
        live.observe({r: dict(fr, entries=fr["entries"][:upto]) for r, fr in full.items()}, float(upto))
    live.restart(100.0)
    assert live.attempt == 1
    healthy = records(40, {0: 0.1, 1: 0.1}, jitter=0.01, start=200.0)
    for upto in range(12, 41, 4):
        assert live.observe({r: dict(fr, entries=fr["entries"][:upto]) for r, fr in healthy.items()},
                            200.0 + upto) is None
    assert [s["attempt"] for s in live.to_json()] == [0]


def test_polls_before_the_first_workers_are_no_attempt():
    """The watchdog polls before torchrun's first workers exist: their start is attempt 0, not 1."""
    live = Live()
    live.observe({}, 0.0)
    live.restart(1.0)
    full = records(40, {0: 0.1, 1: 0.5})
    for upto in range(12, 41, 4):
        live.observe({r: dict(fr, entries=fr["entries"][:upto]) for r, fr in full.items()}, float(upto))
    assert [s["attempt"] for s in live.to_json()] == [0]


def test_a_straggler_among_many_collectives_a_step_is_named():
    """FSDP2 / tensor parallelism: 9 collectives a step, rank 1's extra 0.15 s of its own code lands before one
    of them (between its forward and its backward). Per collective it is 17 ms, under the floor: it was never
    named (issue 37); judged where it lands, it is."""
    rng = random.Random(3)
    t, entries = 0.0, {0: [], 1: [], 2: []}
    for seq in range(45):
        entered = {r: t + 0.005 + rng.uniform(0, 0.003) + (0.15 if r == 1 and seq % 9 == 4 else 0.0)
                   for r in entries}
        for r, at in entered.items():
            entries[r].append({"collective_seq_id": seq, "process_group": ["0", ""],
                               "time_created_ns": int(at * 1e9), "profiling_name": "gloo:all_gather"})
        t = max(entered.values()) + 0.001
    s = judge(created({r: {"entries": e} for r, e in entries.items()}), [0, 1, 2])
    assert s is not None and s.rank == 1 and s.slower_x > 2, s


def test_a_slow_pipeline_stage_is_named_from_its_stacks():
    """A send/recv-only job (no flight record times it): rank 1 found in its own code in most polls while ranks 0
    and 2 wait; named once, after MIN_SAMPLES polls. A healthy pipeline's ranks alternate: nobody."""
    said = []
    live = Live(say=said.append)
    live.restart(0.0)
    found = [live.sample({0: False, 1: i % 7 != 0, 2: i % 5 == 0}, float(i), 1.0) for i in range(30)]
    hits = [s for s in found if s]
    assert len(hits) == 1 and hits[0].rank == 1 and hits[0].sampled >= stragglers.MIN_SAMPLES, hits
    assert "rank 1" in said[0] and "send/recv" in said[0]
    healthy = Live()
    healthy.restart(0.0)
    assert not any(healthy.sample({0: i % 2 == 0, 1: i % 2 == 1, 2: i % 3 == 0}, float(i), 1.0) for i in range(30))


def test_a_straggler_on_a_2d_mesh_is_judged_within_its_groups():
    """dp 2 x tp 2: no collective has all four ranks; rank 1 is slow, its tp pair (group "1": ranks 0, 1) waits."""
    pair = records(30, {0: 0.05, 1: 0.4}, jitter=0.01)
    other = records(30, {2: 0.05, 3: 0.05}, jitter=0.01, seed=2)
    frs = {r: fr for r, fr in pair.items()}
    for r, fr in other.items():
        frs[r] = {"entries": [dict(e, process_group=["2", ""]) for e in fr["entries"]]}
    frs = {r: {"entries": [dict(e, process_group=[e["process_group"][0] if r in (2, 3) else "1", ""])
                           for e in fr["entries"]]} for r, fr in frs.items()}
    s = stragglers.judge_groups(created(frs), [0, 1, 2, 3])
    assert s is not None and s.rank == 1, s


def test_a_rank_that_waited_for_the_straggler_elsewhere_is_not_named_in_its_own_pair():
    """dp 2 x tp 2, rank 1 slow: rank 3 waits for it in their dp group, then comes late into its tp pair with
    rank 2: that pair's judgement names rank 3, but the dp group it shares with rank 1 names rank 1."""
    def group(name, own):
        return {r: {"entries": [dict(e, process_group=[name, ""]) for e in fr["entries"]]}
                for r, fr in records(30, own, jitter=0.01).items()}

    parts = [group("1", {0: 0.05, 2: 0.05}), group("2", {1: 0.4, 3: 0.05}), group("3", {0: 0.05, 1: 0.4}),
             group("4", {2: 0.05, 3: 0.4})]
    frs: dict = {}
    for part in parts:
        for r, fr in part.items():
            frs.setdefault(r, {"entries": []})["entries"].extend(fr["entries"])
    s = stragglers.judge_groups(created(frs), [0, 1, 2, 3])
    assert s is not None and s.rank == 1, s
