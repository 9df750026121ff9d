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
