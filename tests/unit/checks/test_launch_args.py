"""Unit tests of checks/launch_args.py."""
from __future__ import annotations

from ddpdoctor_checks.launch_args import LaunchArgsCheck

from ddpdoctor.api import Level


def fails(results):
    return [r for r in results if r.level is Level.FAIL]


def launch(rank, nnodes=2, nproc=8, rdzv="job1", endpoint="n0:29500"):
    return {"rank": rank, "claim": 1, "launcher": None,
            "launch": {"nnodes": nnodes, "nproc_per_node": nproc, "rdzv_id": rdzv, "endpoint": endpoint}}


def test_launch_args_differences_and_duplicate_ranks():
    res = fails(LaunchArgsCheck().compare({"a": launch(0), "b": launch(1), "c": launch(1, nproc=4, rdzv="x")}, LaunchArgsCheck().with_defaults({})))
    text = " | ".join(r.summary for r in res)
    # issue 20: processes per node may differ (torchrun supports it); the rendezvous id and the ranks may not
    assert "--nproc-per-node" not in text and "c intends --rdzv-id x," in text and "claim node rank 1" in text
    dup = next(r for r in res if "claim" in r.summary)
    assert dup.nodes == ["b", "c"] and "--node-rank" in dup.fix


def levels(results, level):
    return [r for r in results if r.level is level]


def test_launch_args_differing_nnodes_names_the_odd_node():
    res = LaunchArgsCheck().compare({"a": launch(0), "b": launch(1), "c": launch(2, nnodes=3)}, LaunchArgsCheck().with_defaults({}))
    (f,) = levels(res, Level.FAIL)
    assert f.nodes == ["c"] and f.actual == 3 and f.expected == 2 and "--nnodes 2" in f.fix
    ok = LaunchArgsCheck().compare({"a": launch(0), "b": launch(1)}, LaunchArgsCheck().with_defaults({}))
    assert [r.level for r in ok] == [Level.PASS] and "--nnodes 2," in ok[0].summary


def test_heterogeneous_processes_per_node_pass_with_the_world_size_and_what_the_code_must_do():
    # issue 20: the PyTorch multinode tutorial runs 4 GPUs on one machine and 2 on another
    (ok,) = LaunchArgsCheck().compare({"a": launch(0, nproc=4), "b": launch(1, nproc=2)},
                                      LaunchArgsCheck().with_defaults({}))
    assert ok.level is Level.PASS and "4 on a; 2 on b" in ok.summary and "world size 6" in ok.summary
    assert "LOCAL_RANK" in ok.summary and "node_rank × nproc_per_node" in ok.summary
    assert ok.details == {"nproc_per_node": {"a": 4, "b": 2}, "world_size": 6}
    (part,) = LaunchArgsCheck().compare({"a": launch(0, nproc=4), "b": launch(1, nproc=None)},
                                        LaunchArgsCheck().with_defaults({}))
    assert part.level is Level.PASS and "not set on b" in part.summary and "world size unknown" in part.summary


def test_two_nodes_or_a_tie_disagreeing_name_every_side_and_pick_none():
    (two,) = fails(LaunchArgsCheck().compare({"a": launch(0, nnodes=2), "b": launch(1, nnodes=3)},
                                             LaunchArgsCheck().with_defaults({})))
    assert two.nodes == ["a", "b"] and "--nnodes with no majority: 2 on a; 3 on b" in two.summary
    assert "--nnodes 2" not in two.fix and "--nnodes 3" not in two.fix
    four = {n: launch(r, rdzv=("x" if r < 2 else "y")) for r, n in enumerate("abcd")}
    (tie,) = fails(LaunchArgsCheck().compare(four, LaunchArgsCheck().with_defaults({})))
    assert tie.nodes == ["a", "b", "c", "d"] and "x on a, b; y on c, d" in tie.summary
    assert tie.actual == {"a": "x", "b": "x", "c": "y", "d": "y"}
    endpoint = fails(LaunchArgsCheck().compare({"a": launch(0), "b": launch(1, endpoint="n9:1")},
                                               LaunchArgsCheck().with_defaults({})))
    assert [r.nodes for r in endpoint] == [["a", "b"]] and "--rdzv-endpoint" in endpoint[0].summary
