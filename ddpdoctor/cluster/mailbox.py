"""The cluster mailbox: the only code that reads or writes the rendezvous store (torch's TCPStore); the
message types are in messages.py, sealing and opening in envelope.py.

Every message is a typed record, sealed in an envelope whose HMAC (with ``--token``) covers the run's
nonce, the key it is stored under, the sender's slot (node rank and claim) and the body. So a message
from another run, another key or another sender never verifies, and nothing is acted on before it
verifies (with a token) and validates (always: envelope shape, body schema, rank and claim equal to the
key's, byte caps). An invalid message is ignored and kept as a finding; the reader goes on waiting.

Messages are *appended* to their key as newline-framed JSON: a writer that got there first (a forged or
stale message) cannot hide the real one, which the reader finds as the first valid frame.

A *sealed* run (a secret: ``--token`` or the run's own key file, see keyfile.py and PROTOCOL.md) also keeps
its keys out of an outsider's reach: every key but the hello is stored under a name with a suffix only
the secret's holders can compute (``facts/1.1~<hmac>``). A stranger cannot write there before the real
writer (the name is unknown until it exists), so the first frame is the real one, and no counter an
outsider can reach is read with ``add`` (a non-integer value there makes the store drop the reader's
connection): claims are ``compare_set`` slots, heartbeats sealed values. What is written under the public
names is still read (bounded) and named as interference.

Every store call runs under a time limit: a frozen master (SIGSTOP) leaves TCPStore client calls blocked
far beyond the store's own timeout (seen: over 60 s with a 2 s timeout), so each call runs in a daemon
thread that is abandoned at the limit, and the caller is told the master stopped answering.
"""
from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable

from .envelope import claimed_by, frames, open_envelope, seal, sealed_name
from .messages import (CLAIM_KEY, COUNTERS, KINDS, MAX_CLAIMS, MIB, Finding, Invalid, Slot, _need, about, check_hello,
                       key_of)

PREFIX = "ddpdoctor"
OP_TIMEOUT_S = 10.0  # a single store call on a live master answers in milliseconds
STORE_VALUE_MAX = 8 * MIB  # torch's TCPStore refuses a request whose value is larger (it drops the connection)
TAMPERED = "tampered"  # a heartbeat value that is not this node's sealed one (someone else wrote it)
PEEK_BUDGET = 16 * MIB  # bytes a node reads under public names in a sealed run, to name interference
PER_NODE_CAP = 32 * MIB  # all of one sender's messages together


class StoreSilent(Exception):
    """A store call did not answer within its limit (the master is frozen or overloaded)."""


class StoreGone(Exception):
    """A store call failed: the connection to the master's store broke (the master died)."""


def bounded(fn: Callable[[], Any], limit_s: float, what: str) -> Any:
    """Run one store call with a time limit (see the module docstring for why a thread)."""
    box: dict = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    t = threading.Thread(target=work, name="ddpdoctor-store", daemon=True)
    t.start()
    t.join(max(0.05, limit_s))
    if t.is_alive():
        raise StoreSilent(f"no answer to {what} within {limit_s:.0f} s")
    if "error" in box:
        exc = box["error"]
        raise StoreGone(f"{what} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return box.get("value")


class Mailbox:
    """Sealed, validated, bounded messages for one run over one store (a PrefixStore).

    ``token`` is the run's secret (``--token`` or the key file) or None. ``sealed``: this node's messages
    and the master's live under sealed names (only with a secret). ``blind``: a node of a keyed run that
    has no key takes the master's signed messages unverified (the run is unauthenticated, and says so).
    ``open_slots`` (master only): nodes without the key, whose unsigned messages under public names are
    read; the master then also posts a copy of its own messages under the public names."""

    def __init__(self, store, *, token: str | None, nnodes: int, max_nodes: int,
                 pg_connect: Callable[[], Any] | None = None):
        self.store = store
        self._pg_connect = pg_connect  # a second connection to the same store (see pg_store)
        self.token = token
        self.sealed = bool(token)
        self.blind = False
        self.open_slots: set[Slot] = set()
        self.open_allowed = False  # master with the run's own key: nodes without it may post under public names
        self.nnodes = nnodes
        self.max_nodes = max_nodes
        self.run: str | None = None  # the master's nonce, once known
        self.me: Slot | None = None
        self.findings: list[Finding] = []
        self._seen_bad: set[tuple[str, bytes]] = set()
        self._bytes_by_sender: dict[Slot, int] = {}
        self._peeked = 0
        self._hello_frame: bytes | None = None  # the master's own hello, put back if someone replaces it

    # -- names ------------------------------------------------------------------------------------------
    def name(self, key: str, sealed: bool | None = None) -> str:
        """The store key for a logical key: sealed (secret suffix) or public."""
        sealed = self.sealed if sealed is None else sealed
        if key == "hello" or not sealed or not self.token:
            return key
        return sealed_name(self.token, self.run or "", key)

    def _sealed_for(self, slot: Slot | None) -> bool:
        return self.sealed and (slot is None or slot not in self.open_slots)

    # -- raw calls, each bounded ------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[[], Any], limit_s: float = OP_TIMEOUT_S) -> Any:
        return bounded(fn, min(OP_TIMEOUT_S, limit_s), what)

    def count(self, name: str, delta: int = 1, **fmt) -> int:
        key = self.name(COUNTERS[name].format(**fmt))
        return int(self.call(f"an update of {about(COUNTERS[name].format(**fmt))}", lambda: self.store.add(key, delta)))

    def take_claim(self, rank: int, fresh: str) -> int:
        """The first free claim slot of ``rank`` (compare_set: atomic, and a junk value there cannot make the
        store drop this connection as a junk counter would). Junk in a slot only moves this node on."""
        def work() -> int:
            for claim in range(1, MAX_CLAIMS + 1):
                key = self.name(CLAIM_KEY.format(rank=rank, claim=claim))
                if self.store.compare_set(key, "", fresh) == fresh.encode():
                    return claim
            return 0

        return int(self.call(f"claim rank {rank}", work))

    def claimed(self, probes: dict[Any, tuple[int, int, bool]]) -> dict[Any, bool]:
        """Which claim slots exist, in one bounded call: {label: (rank, claim, sealed)} -> {label: present}."""
        keys = {label: self.name(CLAIM_KEY.format(rank=r, claim=c), sealed) for label, (r, c, sealed) in probes.items()}
        return self.call("check claims", lambda: {label: self.store.check([k]) for label, k in keys.items()})

    def beats(self, slots: list[Slot]) -> dict[Slot, int | str | None]:
        """Every slot's last heartbeat number, in one bounded call: None when absent, TAMPERED when what is
        there is not valid (named as a finding; it says nothing about the node)."""
        keys = {s: self.name(key_of("beat", s), self._sealed_for(s)) for s in slots}
        blobs = self.call("a read of the nodes' heartbeats",
                          lambda: {s: (self.store.get(k) if self.store.check([k]) else None) for s, k in keys.items()})
        out: dict[Slot, int | str | None] = {}
        for s, blob in blobs.items():
            body = self._first_valid("beat", s, blob, sealed=self._sealed_for(s)) if blob is not None else None
            out[s] = body["n"] if body is not None else (TAMPERED if blob is not None else None)
        return out

    def present(self, keys: list[str]) -> dict[str, bool]:
        """Which of these keys exist, in one bounded call (one thread for a whole polling round)."""
        return self.call("a look for the nodes' messages", lambda: {k: self.store.check([k]) for k in keys})

    # -- messages ---------------------------------------------------------------------------------------
    def post(self, kind: str, body: dict, slot: Slot | None = None, *, replace: bool = False,
             public_copy: bool = False) -> None:
        spec = KINDS[kind]
        sender = Slot(0, self.me.claim) if spec.from_master else (slot or self.me)
        key = key_of(kind, slot or self.me)
        sealed_frame = seal(body, token=self.token, run=self.run or "", key=key, sender=sender)
        if len(sealed_frame) + 2 > min(spec.cap(self.nnodes), STORE_VALUE_MAX - 2):
            raise StoreGone(f"the {kind} message is {len(sealed_frame)} bytes, over its cap "
                            f"{spec.cap(self.nnodes)} (torch's store takes at most {STORE_VALUE_MAX >> 20} MiB)")
        frame = b"\n" + sealed_frame + b"\n"
        if kind == "hello":
            self._hello_frame = frame
        names = [self.name(key, self._sealed_for(None if spec.from_master else sender))]
        if spec.from_master and self.sealed and (self.open_slots or public_copy) and kind != "hello":
            names.append(key)  # the nodes without the key read the public name (signed: they cannot verify)

        def work() -> None:
            for name in names:
                (self.store.set if replace else self.store.append)(name, frame)

        self.call(f"a write of {about(key)}", work)

    def read(self, kind: str, slot: Slot | None = None, *, sealed: bool | None = None) -> dict | None:
        """The first valid message under this key, or None (absent, or nothing valid yet). In a sealed run
        the public name is read too (bounded by PEEK_BUDGET): what is there is named, never taken."""
        key = key_of(kind, slot)
        sealed = self._sealed_for(slot) if sealed is None else sealed
        if not sealed and self.sealed and not self.open_allowed and slot not in self.open_slots:
            # a public name in a run where every node has the secret: what is there is named, never taken
            # (a node with another --token lands there: it cannot compute this run's sealed names)
            if self._peeked < PEEK_BUDGET:
                junk = self.call(f"a read of {about(key)}", lambda: self.store.get(key) if self.store.check([key]) else None)
                if junk is not None:
                    self._peeked += len(junk)
                    self._first_valid(kind, slot, junk, sealed=True, only_note=True)
            return None
        name = self.name(key, sealed)
        peek = sealed and name != key and self._peeked < PEEK_BUDGET

        def work():
            got = self.store.get(name) if self.store.check([name]) else None
            junk = self.store.get(key) if peek and self.store.check([key]) else None
            return got, junk

        blob, junk = self.call(f"a read of {about(key)}", work)
        if junk is not None:
            self._peeked += len(junk)
            self._first_valid(kind, slot, junk, sealed=sealed, only_note=True)
        if blob is None:
            return None
        return self._first_valid(kind, slot, blob, sealed=sealed)

    def _first_valid(self, kind: str, slot: Slot | None, blob: bytes, *, sealed: bool,
                     only_note: bool = False) -> dict | None:
        spec = KINDS[kind]
        key = key_of(kind, slot)
        cap = spec.cap(self.nnodes)
        ctx = {"nnodes": self.nnodes, "max_nodes": self.max_nodes, "slot": slot}
        token = self.token if sealed or spec.from_master or kind == "hello" else None
        for frame in frames(blob, limit_bytes=4 * cap + MIB):
            try:
                _need(len(frame) <= cap, f"{len(frame)} bytes, over this message's cap of {cap}")
                who, body = open_envelope(frame, token=token, run=None if kind == "hello" else self.run,
                                          key=key, sender=slot, from_master=spec.from_master,
                                          blind=self.blind and spec.from_master)
                spec.check(body, ctx)
                if only_note:
                    continue  # a valid copy under the public name (the master's own, for nodes without a key)
                self._charge(who, len(frame))
                return body
            except Invalid as exc:
                self._note(key, frame, str(exc))
        return None

    def keep_hello(self) -> None:
        """The master's hello lives under a public name (the nodes must find it before they know any secret),
        so anyone who reaches the port can ``set`` over it: a node would then find no hello it can verify
        and stop. Called on every poll while nodes join: when this master's own frame is no longer among the
        first MiB a node reads (where hellos() looks), it is written back alone, and the interference named."""
        frame = self._hello_frame
        if frame is None:
            return

        def work() -> bool:
            blob = self.store.get("hello") if self.store.check(["hello"]) else b""
            if frame in blob[:MIB]:
                return False
            self.store.set("hello", frame)
            return True

        if self.call(f"a check of {about('hello')}", work):
            why = "the master's hello was replaced or buried (someone who reaches the store wrote over it); posted again"
            if not any(f.key == "hello" and f.why == why for f in self.findings):
                self.findings.append(Finding(key="hello", why=why))

    def hellos(self) -> list[tuple[bytes, dict]]:
        """Every hello frame that validates (unverified: the caller decides which secret, if any, it needs)."""
        blob = self.call(f"a read of {about('hello')}", lambda: self.store.get("hello") if self.store.check(["hello"]) else None)
        out = []
        for frame in frames(blob or b"", limit_bytes=MIB):
            try:
                _need(len(frame) <= KINDS["hello"].cap(self.nnodes), "over the hello's cap")
                _, body = open_envelope(frame, token=None, run=None, key="hello", sender=None, from_master=True,
                                        blind=True)
                check_hello(body, {"max_nodes": self.max_nodes})
                out.append((frame, body))
            except Invalid as exc:
                self._note("hello", frame, str(exc))
        return out

    def verifies(self, frame: bytes, secret: str) -> bool:
        try:
            open_envelope(frame, token=secret, run=None, key="hello", sender=None, from_master=True)
            return True
        except Invalid:
            return False

    def _charge(self, who: Slot, size: int) -> None:
        total = self._bytes_by_sender.get(who, 0) + size
        _need(total <= PER_NODE_CAP, f"sender {who} is over {PER_NODE_CAP >> 20} MiB of messages")
        self._bytes_by_sender[who] = total

    def _note(self, key: str, frame: bytes, why: str) -> None:
        sig = (key, hashlib.sha256(frame).digest())
        if sig in self._seen_bad:
            return  # the same bad frame is read again on every poll: one finding
        if len(self._seen_bad) >= 1000:
            return  # a flood: the first thousand are named, the rest cost no memory
        self._seen_bad.add(sig)
        self.findings.append(Finding(key=key, why=why, claimed=claimed_by(frame)))

    def pg_store(self, backend: str):
        """The store a process group meets in: torch's own c10d code uses it directly (it cannot go
        through sealed messages), under a prefix of this run so a stale group never mixes in. Over its own
        connection where one can be made: a TCPStore client runs one call at a time, and a group waiting in
        its rendezvous for a frozen peer would otherwise block the heartbeat and liveness reads for as long
        as the group's timeout (seen: the master calling itself silent). In a sealed run the prefix carries
        a sealed name, so an outsider cannot write into the group's keys before the group does."""
        import torch.distributed as dist

        base = self._pg_connect() if self._pg_connect is not None else self.store
        return dist.PrefixStore(self.name(f"pg/{self.run}/{backend}", self.sealed and not self.open_slots), base)

