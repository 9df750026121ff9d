"""The prolog's kept facts (unattended/kept.py) and the runner's kept mode (runner.gather_all(kept=...)): what the
health check measured through `import torch` stands in for it in a prolog, per environment fingerprint; a check
whose facts are not kept is skipped with a note saying who measures them; nothing in ``imports`` is imported."""
from __future__ import annotations

import os
import sys

import pytest

from ddpdoctor.api import Check, Skip
from ddpdoctor.registry import LoadedCheck
from ddpdoctor.runner import OK, SKIPPED, gather_all
from ddpdoctor.unattended import kept

NEVER = "ddpdoctor_test_module_never_imported"


class Imports(Check):
    name = "imports-something"
    imports = (NEVER,)

    def gather(self, ctx):
        __import__(NEVER)  # would fail: the kept mode must not call it
        return {}

    def compare(self, facts_by_node, opts):
        return []


class Partly(Check):
    """Live beside its kept part, as the gpu check is (NVML live, torch's build kept)."""
    name = "partly"
    imports = (NEVER,)
    kept_facts = ("build",)

    def gather(self, ctx):
        return {"live": 1, **(ctx.kept or {"build": "measured"})}

    def compare(self, facts_by_node, opts):
        return []


class Plain(Check):
    name = "plain"

    def gather(self, ctx):
        raise Skip("nothing here")

    def compare(self, facts_by_node, opts):
        return []


def loaded(*checks):
    return [LoadedCheck(c(), "test", "test") for c in checks]


def test_kept_mode_imports_nothing_and_uses_the_health_checks_facts():
    store = {"created": "2026-11-28T22:00:00+00:00", "facts": {"imports-something": {"v": "2.13"},
                                                                "partly": {"build": "cu124", "live": 0}}}
    facts, outcome = gather_all(loaded(Imports, Partly, Plain), "n1", kept=store, deadline=None)
    assert NEVER not in sys.modules
    assert facts["imports-something"] == {"v": "2.13"} and outcome["imports-something"]["status"] == OK
    assert outcome["imports-something"]["kept_from"] == "2026-11-28T22:00:00+00:00"
    assert facts["partly"] == {"live": 1, "build": "cu124"}  # gathered live, its kept part from the store
    assert outcome["plain"]["status"] == SKIPPED


def test_kept_mode_without_facts_skips_with_a_note_and_a_kept_skip_stays_a_skip():
    facts, outcome = gather_all(loaded(Imports, Partly), "n1", kept={}, deadline=None)
    assert NEVER not in sys.modules
    for name in ("imports-something", "partly"):
        assert outcome[name]["status"] == SKIPPED
        assert "not measured in this software environment yet: the health check measures it" in \
            outcome[name]["message"]
    _, outcome = gather_all(loaded(Imports), "n1", kept={"skipped": {"imports-something": "a CPU build"}})
    assert outcome["imports-something"] == {"status": SKIPPED, "message": "a CPU build (the health check's finding, "
                                            "kept)"}


def test_fingerprint_follows_the_installed_distributions_and_the_driver(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "torch-2.13.0.dist-info").mkdir()
    driver = tmp_path / "version"
    driver.write_text("NVRM version: 550.54.15\n")
    first = kept.fingerprint([str(site)], str(driver))
    assert first == kept.fingerprint([str(site)], str(driver))  # stable
    (site / "torch-2.13.0.dist-info").rename(site / "torch-2.14.0.dist-info")
    second = kept.fingerprint([str(site)], str(driver))
    assert second != first
    driver.write_text("NVRM version: 560.1\n")
    assert kept.fingerprint([str(site)], str(driver)) != second
    os.utime(site / "torch-2.14.0.dist-info", ns=(1, 1))  # reinstalled in place: a new mtime
    assert kept.fingerprint([str(site)], str(driver)) not in (first, second)


def test_saved_facts_load_back_and_a_link_or_a_file_others_can_write_is_refused(tmp_path):
    doc = {"nodes": {"n1": {"facts": {"torch-build": {"torch": "2.13"}, "resources": {"shm": 1}, "gpu-perf": {}},
                            "gather": {"torch-build": {"status": "ok"}, "resources": {"status": "ok"},
                                       "gpu-perf": {"status": "skip", "message": "off"}}}}}
    facts, skipped = kept.facts_to_keep(doc, {"torch-build": ("torch",), "resources": (), "gpu-perf": ("torch",)})
    assert facts == {"torch-build": {"torch": "2.13"}} and skipped == {"gpu-perf": "off"}
    path = kept.save(str(tmp_path), "n1", "abc", facts, "2026-11-28T22:00:00+00:00", skipped)
    data, why = kept.load(str(tmp_path), "n1", "abc")
    assert why == "" and data["facts"] == facts and data["skipped"] == skipped
    assert kept.load(str(tmp_path), "n1", "other") == (None, "no facts kept for this environment yet")
    path.chmod(0o666)
    assert "refused" in kept.load(str(tmp_path), "n1", "abc")[1]
    path.chmod(0o644)
    real = path.with_name("real.json")
    path.rename(real)
    path.symlink_to(real)
    data, why = kept.load(str(tmp_path), "n1", "abc")
    assert data is None and "not read" in why


def test_only_the_newest_fingerprints_are_kept(tmp_path):
    for i in range(kept.KEEP_FINGERPRINTS + 2):
        p = kept.save(str(tmp_path), "n1", f"fp{i}", {"c": {}}, "t")
        os.utime(p, (i, i))
    names = sorted(p.name for p in p.parent.glob("*.json"))
    assert len(names) == kept.KEEP_FINGERPRINTS


@pytest.mark.skipif(os.geteuid() != 0, reason="a file another user owns needs root to make")
def test_a_file_another_user_owns_is_refused_as_root(tmp_path):
    path = kept.save(str(tmp_path), "n1", "abc", {"c": {}}, "t")
    os.chown(path, 65534, 65534)
    assert kept.load(str(tmp_path), "n1", "abc")[0] is None


class Stuck(Check):
    name = "stuck"

    def gather(self, ctx):
        import time

        time.sleep(5)  # a daemon thread: abandoned at the deadline, never waited for
        return {}

    def compare(self, facts_by_node, opts):
        return []


def test_a_check_the_budget_cuts_short_is_a_skip_for_time_naming_the_configured_budget():
    """Issue 46: the notes said "6 s budget" and "2 s budget" with 8 configured (the time left at gather's start)."""
    import time

    start = time.monotonic()
    _, outcome = gather_all(loaded(Stuck, Plain), "n1", deadline=start + 0.3, within_budget=True, budget_s=8)
    assert time.monotonic() - start < 2
    assert outcome["stuck"]["status"] == SKIPPED and outcome["stuck"]["for_time"] is True
    assert outcome["stuck"]["message"].startswith("not finished within the 8 s budget: skipped")
    assert "for_time" not in outcome["plain"]  # skipped by itself: it does not apply, not a lack of time


def test_a_shared_library_truncated_or_replaced_in_place_is_a_new_environment(tmp_path):
    """node3's libtorch_cpu.so truncated, its dist-info unchanged: before, the prolog judged torch-build from the
    facts of the torch that imported."""
    site = tmp_path / "site-packages"
    (site / "torch-2.13.0.dist-info").mkdir(parents=True)
    lib = site / "torch" / "lib" / "libtorch_cpu.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF" + b"\0" * 4096)
    nccl = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    nccl.parent.mkdir(parents=True)
    nccl.write_bytes(b"\x7fELF" + b"\0" * 64)
    first = kept.fingerprint([str(site)], str(tmp_path / "no-driver"))
    stamp = lib.stat().st_mtime_ns
    with open(lib, "r+b") as f:
        f.truncate(100)
    os.utime(lib, ns=(stamp, stamp))  # the same mtime: the size alone tells
    truncated = kept.fingerprint([str(site)], str(tmp_path / "no-driver"))
    assert truncated != first
    nccl.write_bytes(b"\x7fELF" + b"\1" * 64)
    os.utime(nccl, ns=(1, 1))
    assert kept.fingerprint([str(site)], str(tmp_path / "no-driver")) not in (first, truncated)


def test_a_failing_runs_facts_are_not_kept_to_judge_by():
    """The health check that found torch not importing kept its facts; after the fix the prologs judged by them
    ("torch does not import" while it imported) and undid the admin's resume."""
    doc = {"results": [{"check": "torch-build", "level": "fail", "summary": "torch does not import: libtorch_cpu.so"}],
           "nodes": {"n1": {"facts": {"torch-build": {"error": "ImportError"}}, "gather": {"torch-build": {"status": "ok"}}}}}
    facts, skipped = kept.facts_to_keep(doc, {"torch-build": ("torch",)})
    assert facts == {} and "found it failing (torch does not import: libtorch_cpu.so)" in skipped["torch-build"]
    doc["results"][0]["level"] = "warn"
    assert kept.facts_to_keep(doc, {"torch-build": ("torch",)})[0] == {"torch-build": {"error": "ImportError"}}
    assert kept.facts_to_keep(doc, {"torch-build": ("torch",)}, ("fail", "warn"))[0] == {}
