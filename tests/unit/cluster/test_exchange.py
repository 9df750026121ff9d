"""The exchange step ("the master publishes, the nodes answer"): publish_all on the master, the shared-dir check
on it (its file, its cleanup), and the plugin example of checks/PLUGINS.md run as written."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from ddpdoctor_checks.shared_dir import SharedDirCheck

from ddpdoctor.api import Check, Level, NodeContext, Skip
from ddpdoctor.cluster import exchange
from ddpdoctor.cluster.messages import Invalid, check_exchange
from ddpdoctor.cluster.view import ClusterView
from ddpdoctor.registry import LoadedCheck
from ddpdoctor.runner import Plan

ROOT = Path(__file__).resolve().parents[3]


def view(shared_dir=None, name="m") -> ClusterView:
    me = {"name": name, "rank": 0}
    return ClusterView(me=me, nodes=[me], master={"name": "m", "rank": 0}, endpoint="10.0.0.1:29500",
                       shared_dir=shared_dir)


def plan(*checks: Check) -> Plan:
    return Plan(checks=[LoadedCheck(c, "test 0", "x") for c in checks], opts_by_check={}, run={})


def make(name: str, publish, phase: str = "cluster", publishes: bool = True, timeout_s: float = 30.0) -> Check:
    cls = type(name.title(), (Check,), {"name": name, "phase": phase, "publishes": publishes,
                                        "timeout_s": timeout_s, "publish": lambda self, ctx: publish(ctx)})
    return cls()


def test_only_cluster_checks_that_declare_it_publish():
    p = plan(make("a", lambda ctx: {"x": 1}), make("b", lambda ctx: {"x": 2}, publishes=False),
             make("c", lambda ctx: {"x": 3}, phase="local"))
    assert [lc.name for lc in exchange.publishers(p)] == ["a"]
    assert exchange.publish_all(p, view(), rank=0, nnodes=2, deadline=time.monotonic() + 5) == {"a": {"x": 1}}


def sleep_then(ctx):
    time.sleep(30)
    return {"late": True}


@pytest.mark.timeout(40)
def test_a_publish_that_fails_publishes_why_and_none_publishes_nothing():
    def boom(ctx):
        raise RuntimeError("no disk")

    p = plan(make("none", lambda ctx: None), make("boom", boom), make("odd", lambda ctx: [1]),
             make("slow", sleep_then, timeout_s=0.3), make("ok", lambda ctx: {"opts": sorted(ctx.opts), "me": ctx.node}))
    started = time.monotonic()
    got = exchange.publish_all(p, view(), rank=0, nnodes=2, deadline=time.monotonic() + 25)
    # the slow one (30 s) is abandoned at its own timeout (0.3 s), not the run's (25 s); 9.7 s: a loaded box
    assert time.monotonic() - started < 0.3 + 9.7
    assert "none" not in got
    assert "RuntimeError: no disk" in got["boom"]["error"]
    assert "not a dict" in got["odd"]["error"] and "within" in got["slow"]["error"]
    assert got["ok"] == {"opts": [], "me": "m"}
    check_exchange({"values": got}, {})  # what the master posts passes the message's own validation


def test_the_exchange_message_is_validated():
    with pytest.raises(Invalid, match="values"):
        check_exchange({"values": {"a": [1]}}, {})
    with pytest.raises(Invalid, match="values"):
        check_exchange({"values": "x"}, {})


def ctx_for(v: ClusterView, check: Check) -> NodeContext:
    return NodeContext(node=v.me["name"], rank=v.me["rank"], nnodes=2, opts=check.with_defaults({"visible_within_s": 0.5}),
                       cluster=v, deadline=time.monotonic() + 5)


def test_shared_dir_publishes_its_nonce_file_and_undoes_it_at_the_end(tmp_path):
    check = SharedDirCheck()
    master = view(str(tmp_path))
    published = exchange.publish_all(plan(check), master, rank=0, nnodes=2, deadline=time.monotonic() + 5)
    (written,) = list(tmp_path.glob(".ddpdoctor-shared-*"))
    assert published["shared-dir"]["file"] == written.name and written.read_text() == published["shared-dir"]["nonce"]
    worker = view(str(tmp_path), name="w")
    worker.published = published
    facts = check.gather(ctx_for(worker, check))
    assert facts["seen"] is True
    for undo in master.cleanups:
        undo()
    assert list(tmp_path.iterdir()) == []


def test_shared_dir_names_what_never_came_and_an_unwritable_dir(tmp_path):
    check = SharedDirCheck()
    nothing = view(str(tmp_path), name="w")  # the exchange never came: the node cannot see a file
    assert check.gather(ctx_for(nothing, check))["seen"] is False
    missing = view(str(tmp_path / "gone"))  # the master cannot write there
    published = exchange.publish_all(plan(check), missing, rank=0, nnodes=2, deadline=time.monotonic() + 5)
    assert published["shared-dir"]["nonce"].startswith("unwritable") and missing.cleanups == []
    with pytest.raises(Skip):
        check.gather(ctx_for(view(None), check))


def test_the_plugin_example_works_as_written(tmp_path):
    text = (ROOT / "checks/PLUGINS.md").read_text()
    code = re.search(r"```python\n(# my_checks/manifest.py\n.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "PLUGINS.md", "exec"), namespace)  # noqa: S102 - the documentation's own example
    check = namespace["SameManifest"]()
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"shards": 8}')
    opts = check.with_defaults({"path": str(manifest)})
    master = view()
    published = exchange.publish_all(Plan([LoadedCheck(check, "t", "x")], {check.name: opts}, {}), master,
                                     rank=0, nnodes=2, deadline=time.monotonic() + 5)
    master.published = published
    ctx = NodeContext(node="m", opts=opts, cluster=master)
    same = check.gather(ctx)
    manifest.write_text('{"shards": 7}')
    other = check.gather(ctx)
    results = check.compare({"m": same, "w": other}, opts)
    assert [(r.nodes, r.level) for r in results] == [(["m"], Level.PASS), (["w"], Level.FAIL)]
    master.published = {}
    with pytest.raises(Skip):
        check.gather(ctx)
