"""The cluster mailbox: sealing, schema validation and store handling with plain dicts and a real TCPStore."""
from __future__ import annotations

import datetime
import json

import pytest

from ddpdoctor.cluster import envelope, messages
from ddpdoctor.cluster import mailbox as mbx
from ddpdoctor.cluster.envelope import open_envelope, seal
from ddpdoctor.cluster.mailbox import Mailbox
from ddpdoctor.cluster.messages import Invalid, Slot

RUN = "a" * 32


def ident(rank=1, claim=1, **over) -> dict:
    body = {"rank": rank, "claim": claim, "host": "node1", "fqdn": "node1.example", "addr": "10.0.0.2",
            "probe_port": 4000, "pid": 12, "boot_id": None, "tool_version": "0.1.0", "launcher": None,
            "fresh": "b" * 32, "launch": {"nnodes": 2, "nproc_per_node": None, "rdzv_id": None,
                                           "endpoint": "10.0.0.1:29500"}, "checks": ["mesh"]}
    body.update(over)
    return body


def sealed(body, *, token="tok", run=RUN, key="ident/1/1", sender=Slot(1, 1)) -> bytes:
    return seal(body, token=token, run=run, key=key, sender=sender)


def opened(frame, *, token="tok", run=RUN, key="ident/1/1", sender=Slot(1, 1), from_master=False):
    return open_envelope(frame, token=token, run=run, key=key, sender=sender, from_master=from_master)


def test_a_sealed_message_opens_with_the_same_token_run_key_and_sender():
    who, body = opened(sealed(ident()))
    assert who == Slot(1, 1) and body == ident()


@pytest.mark.parametrize("change, reason", [
    (dict(token="other"), "signature does not match"),
    (dict(run="c" * 32), "another run"),
    (dict(key="ident/1/2"), "stored under"),
    (dict(sender=Slot(1, 2)), "the key belongs to"),
    (dict(token=None), "signed with a token, and this node has none"),
])
def test_another_token_run_key_or_sender_never_verifies(change, reason):
    with pytest.raises(Invalid, match=reason):
        opened(sealed(ident()), **change)


def test_unsigned_message_is_refused_when_a_token_is_required():
    with pytest.raises(Invalid, match="unsigned"):
        opened(sealed(ident(), token=None))


def test_tampered_body_or_sender_breaks_the_signature():
    env = json.loads(sealed(ident()))
    env["body"] = env["body"].replace('"node1"', '"evil1"', 1)
    with pytest.raises(Invalid, match="signature"):
        opened(json.dumps(env).encode())
    env = json.loads(sealed(ident()))
    env["from"] = [0, 1]
    env["key"] = "ident/1/1"
    with pytest.raises(Invalid, match="belongs to|signature"):
        opened(json.dumps(env).encode())


def test_master_messages_only_from_rank_zero():
    frame = seal({"go": True, "reason": ""}, token="tok", run=RUN, key="collective-go", sender=Slot(1, 1))
    with pytest.raises(Invalid, match="only the master"):
        opened(frame, key="collective-go", sender=None, from_master=True)


@pytest.mark.parametrize("frame", [b"not json", b"\xff\xfe\x00", json.dumps([1, 2]).encode(), b"{}",
                                   json.dumps({"v": 1, "run": RUN, "key": "ident/1/1", "from": "x", "body": "{}",
                                               "sig": ""}).encode(),
                                   b"[" * 100000])
def test_junk_frames_are_invalid_not_exceptions(frame):
    with pytest.raises(Invalid):
        opened(frame, token=None)


CTX = {"nnodes": 4, "max_nodes": 16384, "slot": Slot(1, 1)}


@pytest.mark.parametrize("over, reason", [
    (dict(rank=99), "rank"), (dict(rank=-1), "rank"), (dict(rank=True), "rank"), (dict(rank=2), "key's rank"),
    (dict(claim=2), "claim"), (dict(host="h" * 10000), "host"), (dict(host="a\x1b[31mb"), "host"),
    (dict(host=None), "host"), (dict(addr="not-an-ip"), "addr"), (dict(probe_port=70000), "probe_port"),
    (dict(launch=[]), "launch"), (dict(checks="mesh"), "checks"), (dict(fresh="zz"), "fresh"),
])
def test_identity_schema_names_the_bad_field(over, reason):
    with pytest.raises(Invalid, match=reason):
        messages.check_ident(ident(**over), CTX)


def test_identity_without_a_field_is_invalid():
    body = ident()
    del body["host"]
    with pytest.raises(Invalid, match="host"):
        messages.check_ident(body, CTX)


def test_verdict_and_roster_schemas():
    messages.check_verdict({"verdict": "pass", "exit_code": 0, "results": [], "nodes": {}, "advice": []}, CTX)
    for bad in ({"verdict": "ok", "exit_code": 0, "results": [], "nodes": {}},
                {"verdict": "pass", "exit_code": True, "results": [], "nodes": {}},
                {"verdict": "pass", "exit_code": 0, "results": {}, "nodes": {}}):
        with pytest.raises(Invalid):
            messages.check_verdict(bad, CTX)
    messages.check_roster({"status": "aborted", "message": "x"}, CTX)
    with pytest.raises(Invalid):
        messages.check_roster({"status": "ok", "nodes": [], "master": "m", "rejected": {}}, CTX)
    good = dict(ident(rank=0), name="node1")
    messages.check_roster({"status": "ok", "nodes": [good], "master": "node1", "rejected": {}}, CTX)


def test_frames_survive_junk_without_newlines():
    blob = b"junk-without-newline" + b"\n" + sealed(ident()) + b"\n"
    assert len(envelope.frames(blob)) == 2


# ---------------------------------------------------------------- over a real store


@pytest.fixture
def store():
    import torch.distributed as dist

    from ddpdoctor.cluster.local import free_port

    server = dist.TCPStore("127.0.0.1", free_port(), None, True, datetime.timedelta(seconds=10),
                           wait_for_workers=False)
    yield dist.PrefixStore("ddpdoctor", server)


def test_first_valid_frame_wins_and_junk_becomes_one_finding(store):
    mb = Mailbox(store, token="tok", nnodes=4, max_nodes=16384)
    mb.run = RUN
    store.append("ident/1/1", b"\n{not json\n")
    store.append("ident/1/1", b"\n" + sealed(ident(), token="wrong") + b"\n")
    assert mb.read("ident", Slot(1, 1)) is None
    assert mb.read("ident", Slot(1, 1)) is None  # re-read on the next poll: no second finding
    assert [f.why for f in mb.findings] == ["not an ASCII JSON envelope", "signature does not match this node's token"]
    assert "node1" in mb.findings[1].claimed and "10.0.0.2" in mb.findings[1].claimed
    mb.me = Slot(1, 1)
    mb.post("ident", ident())  # the real node appends after the junk: it is found
    assert mb.read("ident", Slot(1, 1)) == ident()


def test_oversized_message_is_refused(store):
    mb = Mailbox(store, token=None, nnodes=2, max_nodes=16384)
    mb.run = RUN
    big = {"nonce": "x" * (20 << 10), "file": "f"}
    store.append("exchange", b"\n" + seal(big, token=None, run=RUN, key="exchange", sender=Slot(0, 1)) + b"\n")
    assert mb.read("exchange") is None and "cap" in mb.findings[0].why


def test_a_frozen_store_call_is_bounded():
    import threading
    import time

    gate = threading.Event()
    start = time.monotonic()
    with pytest.raises(mbx.StoreSilent):
        mbx.bounded(gate.wait, 0.3, "a call that never answers")
    assert time.monotonic() - start < 0.3 + 9.7  # its limit (it would wait forever); 9.7 s: a late thread, loaded box
    gate.set()
    with pytest.raises(mbx.StoreGone, match="Broken pipe"):
        mbx.bounded(lambda: (_ for _ in ()).throw(RuntimeError("Broken pipe")), 1.0, "a dead master")


def test_verdict_says_where_the_master_wrote_the_cluster_result_and_it_is_validated():
    base = {"verdict": "pass", "exit_code": 0, "results": [], "nodes": {}, "advice": []}
    messages.check_verdict(base | {"master": {"node": "node1", "host": "node1", "output_dir": "/shared/out"}}, CTX)
    messages.check_verdict(base | {"master": {"node": "node1", "host": "node1", "output_dir": None}}, CTX)
    for bad in ({"node": "node1", "host": "node1", "output_dir": "x" * 5000},
                {"node": "node1", "host": "bad host\x1b[31m", "output_dir": None},
                {"node": 7, "host": "node1"}, "node1"):
        with pytest.raises(Invalid):
            messages.check_verdict(base | {"master": bad}, CTX)


# ---------------------------------------------------------------- sealed names, claims, heartbeats, verdicts


def test_a_sealed_run_keeps_its_keys_under_names_only_the_secret_gives(store):
    mb = Mailbox(store, token="tok", nnodes=2, max_nodes=16)
    mb.run = RUN
    name = mb.name("facts/1.1")
    assert name.startswith("facts/1.1~") and name != envelope.sealed_name("other", RUN, "facts/1.1")
    assert mb.name("hello") == "hello"  # the one public message
    assert Mailbox(store, token=None, nnodes=2, max_nodes=16).name("facts/1.1") == "facts/1.1"


def test_junk_under_the_public_name_is_named_and_cannot_hide_the_sealed_message(store):
    mb = Mailbox(store, token="tok", nnodes=2, max_nodes=16)
    mb.run, mb.me = RUN, Slot(1, 1)
    for i in range(200):  # more junk frames than any frame count a reader would stop at
        store.append("facts/1.1", f"\njunk {i}\n".encode())
    mb.post("facts", {"facts": {}, "gather": {}})
    store.append(mb.name("facts/1.1"), b"\njunk after the real frame\n")
    assert mb.read("facts", Slot(1, 1)) == {"facts": {}, "gather": {}}
    assert mb.findings and all(f.key == "facts/1.1" for f in mb.findings)


def test_the_master_puts_back_a_hello_someone_replaced_or_buried(store):
    """The hello is the one public key of a sealed run: an outsider's ``set`` over it (or 1 MiB of junk in
    front of it, past where a node looks) would leave every node without a hello it can verify."""
    mb = Mailbox(store, token="tok", nnodes=2, max_nodes=16)
    mb.run, mb.me = RUN, Slot(0, 0)
    mb.keep_hello()  # nothing posted yet: nothing to keep
    assert not store.check(["hello"])
    mb.post("hello", {"protocol": 1, "nonce": RUN, "nnodes": 2, "t": 1.0})
    store.append("hello", b"\njunk after the real one\n")
    mb.keep_hello()
    assert mb.findings == [] and store.get("hello").startswith(b"\n{")  # still there: left alone
    reader = Mailbox(store, token="tok", nnodes=2, max_nodes=16)
    for forged in (b"\nforged\n", b"\n" + b"x" * messages.MIB + b"\n"):
        store.set("hello", forged)
        assert [b for _, b in reader.hellos()] == []
        mb.keep_hello()
        assert [b["nonce"] for _, b in reader.hellos()] == [RUN]
    assert [f.key for f in mb.findings] == ["hello"] and "posted again" in mb.findings[0].why


def test_claims_are_compare_set_slots_that_junk_cannot_poison(store):
    mb = Mailbox(store, token="tok", nnodes=2, max_nodes=16)
    mb.run = RUN
    store.set(mb.name("claim/1/1"), b"x")  # a junk value where a counter would make the store drop us
    assert mb.take_claim(1, "f" * 32) == 2
    assert mb.take_claim(1, "e" * 32) == 3  # a second node with the same rank: the next slot
    assert mb.claimed({"a": (1, 3, True), "b": (1, 4, True)}) == {"a": True, "b": False}
    for claim in range(1, messages.MAX_CLAIMS + 1):
        store.set(envelope.sealed_name("tok", RUN, f"claim/0/{claim}"), b"x")
    assert mb.take_claim(0, "d" * 32) == 0  # a flood: said, never a hang


def test_a_heartbeat_someone_else_wrote_is_tampered_not_silence(store):
    mb = Mailbox(store, token="tok", nnodes=2, max_nodes=16)
    mb.run, mb.me = RUN, Slot(1, 1)
    mb.post("beat", {"n": 3}, replace=True)
    assert mb.beats([Slot(1, 1), Slot(0, 1)]) == {Slot(1, 1): 3, Slot(0, 1): None}
    store.set(mb.name("beat/1.1"), b"x")
    assert mb.beats([Slot(1, 1)]) == {Slot(1, 1): mbx.TAMPERED}
    assert store.add("still-connected", 1) == 1  # the read did not cost this client its connection


@pytest.mark.parametrize("results", [["x"], [{}], [{"check": "c", "level": "pass"}], [{"check": "c", "level": "bad",
                                                                                         "summary": "s"}]])
def test_a_verdict_with_malformed_results_is_invalid_not_a_crash(results):
    with pytest.raises(Invalid, match="results"):
        messages.check_verdict({"verdict": "pass", "exit_code": 0, "results": results, "nodes": {}}, CTX)
    messages.check_verdict({"verdict": "pass", "exit_code": 0, "nodes": {}, "advice": [],
                       "results": [{"check": "c", "level": "pass", "summary": "s", "nodes": ["a"], "fix": ""}]}, CTX)


def test_every_message_fits_torchs_store_value_limit():
    for kind, spec in messages.KINDS.items():
        assert spec.cap(16384) + 2 <= mbx.STORE_VALUE_MAX, kind


@pytest.mark.parametrize("host", ["h" * 64, "a." + "b" * 100, "x" * 254])
def test_a_host_name_the_resolver_refuses_is_an_invalid_identity(host):
    with pytest.raises(Invalid, match="host"):
        messages.check_ident(ident(host=host), CTX)
