"""The cluster mailbox: sealing, schema validation and store handling with plain dicts and a real TCPStore."""
from __future__ import annotations

import datetime
import json

import pytest

from ddpdoctor.cluster import mailbox as mbx
from ddpdoctor.cluster.mailbox import Invalid, Mailbox, Slot, open_envelope, seal

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
        mbx.check_ident(ident(**over), CTX)


def test_identity_without_a_field_is_invalid():
    body = ident()
    del body["host"]
    with pytest.raises(Invalid, match="host"):
        mbx.check_ident(body, CTX)


def test_verdict_and_roster_schemas():
    mbx.check_verdict({"verdict": "pass", "exit_code": 0, "results": [], "nodes": {}, "advice": []}, CTX)
    for bad in ({"verdict": "ok", "exit_code": 0, "results": [], "nodes": {}},
                {"verdict": "pass", "exit_code": True, "results": [], "nodes": {}},
                {"verdict": "pass", "exit_code": 0, "results": {}, "nodes": {}}):
        with pytest.raises(Invalid):
            mbx.check_verdict(bad, CTX)
    mbx.check_roster({"status": "aborted", "message": "x"}, CTX)
    with pytest.raises(Invalid):
        mbx.check_roster({"status": "ok", "nodes": [], "master": "m", "rejected": {}}, CTX)
    good = dict(ident(rank=0), name="node1")
    mbx.check_roster({"status": "ok", "nodes": [good], "master": "node1", "rejected": {}}, CTX)


def test_frames_survive_junk_without_newlines():
    blob = b"junk-without-newline" + b"\n" + sealed(ident()) + b"\n"
    assert len(mbx.frames(blob)) == 2


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
    store.append("shared-nonce", b"\n" + seal(big, token=None, run=RUN, key="shared-nonce", sender=Slot(0, 1)) + b"\n")
    assert mb.read("shared") is None and "cap" in mb.findings[0].why


def test_a_frozen_store_call_is_bounded():
    import threading
    import time

    gate = threading.Event()
    start = time.monotonic()
    with pytest.raises(mbx.StoreSilent):
        mbx.bounded(gate.wait, 0.3, "a call that never answers")
    assert time.monotonic() - start < 0.3 + 1.7  # its limit; 1.7 s: a late thread on a loaded box
    gate.set()
    with pytest.raises(mbx.StoreGone, match="Broken pipe"):
        mbx.bounded(lambda: (_ for _ in ()).throw(RuntimeError("Broken pipe")), 1.0, "a dead master")
