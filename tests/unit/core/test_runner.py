"""runner: gathers in parallel under deadlines (errors, skips, timeouts contained), compares purely, typed options."""
from __future__ import annotations

import threading
import time

import pytest

from ddpdoctor import runner
from ddpdoctor.api import Check, Level, Option, Skip
from ddpdoctor.registry import LoadedCheck


def loaded(check: Check) -> LoadedCheck:
    return LoadedCheck(check=check, source="tests 0", entry_point="tests:x")


class Fine(Check):
    name = "fine"
    options = {"limit": Option(5, "a limit")}

    def gather(self, ctx):
        return {"limit": ctx.opts["limit"], "node": ctx.node}

    def compare(self, facts_by_node, opts):
        return [self.passed(f"limit {opts['limit']}", sorted(facts_by_node))]


class Raises(Check):
    name = "raises"

    def gather(self, ctx):
        raise RuntimeError("driver exploded")


class Skips(Check):
    name = "skips"

    def gather(self, ctx):
        raise Skip("not on this node")


class Hangs(Check):
    name = "hangs"
    timeout_s = 0.3
    gate = threading.Event()

    def gather(self, ctx):
        self.gate.wait(30)
        return {}


class NotADict(Check):
    name = "not-a-dict"

    def gather(self, ctx):
        return [1, 2]


def test_each_gather_is_contained_and_bounded():
    start = time.monotonic()
    facts, outcome = runner.gather_all([loaded(c()) for c in (Fine, Raises, Skips, Hangs, NotADict)], "n1",
                                       opts_by_check={"fine": {"limit": 7}})
    assert time.monotonic() - start < Hangs.timeout_s + 4.7  # the slowest check's limit; 4.7 s: a loaded box
    assert outcome["fine"]["status"] == runner.OK and facts["fine"] == {"limit": 7, "node": "n1"}
    assert outcome["raises"]["status"] == runner.ERROR and "driver exploded" in outcome["raises"]["message"]
    assert outcome["skips"]["status"] == runner.SKIPPED and outcome["skips"]["message"] == "not on this node"
    assert outcome["hangs"]["status"] == runner.TIMEOUT and facts["hangs"] == {}
    assert outcome["not-a-dict"]["status"] == runner.ERROR
    Hangs.gate.set()


def test_the_runs_deadline_caps_every_check():
    Hangs.gate.clear()

    class Slow(Hangs):
        name = "slow"
        timeout_s = 60

    start = time.monotonic()
    _, outcome = runner.gather_all([loaded(Slow())], "n1", deadline=time.monotonic() + 0.3)
    assert outcome["slow"]["status"] == runner.TIMEOUT
    assert time.monotonic() - start < 0.3 + 9.7  # the run's deadline (the check: 60 s); 9.7 s: a late thread, loaded box
    Hangs.gate.set()


def test_declared_imports_happen_first_on_the_calling_thread(monkeypatch):
    seen = []

    class NeedsJson(Fine):
        name = "needs-json"
        imports = ("json", "no_such_module_xyz")  # a missing one is the check's problem, not the runner's

    import importlib

    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda n: (seen.append((n, threading.current_thread().name)),
                                                                real(n))[1])
    runner.gather_all([loaded(NeedsJson())], "n1")
    assert ("json", threading.main_thread().name) in seen


def test_compare_gets_typed_complete_options_and_a_raising_compare_is_a_named_fail():
    class Boom(Fine):
        name = "boom"

        def compare(self, facts_by_node, opts):
            raise KeyError("x")

    nodes = {"n1": {"facts": {"fine": {"limit": 5}, "boom": {}},
                    "gather": {"fine": {"status": "ok"}, "boom": {"status": "ok"}}}}
    results = runner.compare_all([loaded(Fine()), loaded(Boom())], nodes, {"fine": {"limit": "9"}})
    by = {r.check: r for r in results}
    assert by["fine"].summary == "limit 9"  # converted from the string --set would give
    assert by["boom"].level is Level.FAIL and "KeyError" in by["boom"].summary and "tests 0" in by["boom"].fix


def test_a_gather_error_on_one_node_fails_that_node_only():
    nodes = {"n1": {"facts": {"fine": {}}, "gather": {"fine": {"status": "ok"}}},
             "n2": {"facts": {}, "gather": {"fine": {"status": "error", "message": "boom"}}}}
    results = runner.compare_all([loaded(Fine())], nodes, {})
    fails = [r for r in results if r.level is Level.FAIL]
    assert [r.nodes for r in fails] == [["n2"]] and any(r.level is Level.PASS for r in results)


@pytest.mark.parametrize("value", [True, "nan", "inf", -1])
def test_bad_option_values_are_refused(value):
    with pytest.raises(ValueError):
        Fine().with_defaults({"limit": value})
