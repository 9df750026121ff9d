"""The cluster mailbox: the only code that reads or writes the rendezvous store (torch's TCPStore).

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
import hmac
import ipaddress
import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..exitcodes import ExitCode

PROTOCOL = 1
PREFIX = "ddpdoctor"
MAX_CLAIMS = 16  # claims of one rank read by the master: more is a flood, not a cluster
OP_TIMEOUT_S = 10.0  # a single store call on a live master answers in milliseconds

KIB, MIB = 1 << 10, 1 << 20
STORE_VALUE_MAX = 8 * MIB  # torch's TCPStore refuses a request whose value is larger (it drops the connection)
TAMPERED = "tampered"  # a heartbeat value that is not this node's sealed one (someone else wrote it)
PEEK_BUDGET = 16 * MIB  # bytes a node reads under public names in a sealed run, to name interference


@dataclass(frozen=True)
class Slot:
    """Who sends: a node rank and the claim number it got for that rank (two nodes may claim one rank)."""

    rank: int
    claim: int

    def __str__(self) -> str:
        return f"{self.rank}.{self.claim}"


class StoreSilent(Exception):
    """A store call did not answer within its limit (the master is frozen or overloaded)."""


class StoreGone(Exception):
    """A store call failed: the connection to the master's store broke (the master died)."""


# ----------------------------------------------------------------------------------------------------
# Schemas. The records are few and flat; a schema library would be a dependency for a dozen lines.

HOST_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?$")  # DNS: labels <= 63
HEX_RE = re.compile(r"^[0-9a-f]{16,64}$")


class Invalid(ValueError):
    """A message that does not match its schema (the reason says which field)."""


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise Invalid(why)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any, field: str, cap: int, *, optional: bool = False, pattern: re.Pattern | None = None) -> None:
    if v is None and optional:
        return
    _need(isinstance(v, str), f"{field} is not a string")
    _need(len(v) <= cap, f"{field} is longer than {cap} characters")
    if pattern is not None:
        _need(bool(pattern.match(v)), f"{field} has characters a host name cannot have")


def _int(v: Any, field: str, lo: int, hi: int, *, optional: bool = False) -> None:
    if v is None and optional:
        return
    _need(_is_int(v) and lo <= v <= hi, f"{field} is not an integer in {lo}..{hi}")


def _dict(v: Any, field: str) -> None:
    _need(isinstance(v, dict), f"{field} is not an object")


def _addr(v: Any, field: str) -> None:
    _str(v, field, 64)
    try:
        ipaddress.ip_address(v.split("%")[0])
    except ValueError:
        raise Invalid(f"{field} is not an IP address") from None


def check_hello(body: dict, ctx: dict) -> None:
    _need(body.get("protocol") == PROTOCOL, f"protocol is not {PROTOCOL}")
    _str(body.get("nonce"), "nonce", 64, pattern=HEX_RE)
    _int(body.get("nnodes"), "nnodes", 1, ctx["max_nodes"])
    _str(body.get("key_id"), "key_id", 64, optional=True, pattern=HEX_RE)
    _need(isinstance(body.get("t", 0), (int, float)) and not isinstance(body.get("t", 0), bool), "t is not a number")


def check_ident(body: dict, ctx: dict) -> None:
    slot: Slot = ctx["slot"]
    _int(body.get("rank"), "rank", 0, ctx["nnodes"] - 1)
    _need(body["rank"] == slot.rank, f"rank {body['rank']} is not the key's rank {slot.rank}")
    _need(body.get("claim") == slot.claim, f"claim is not the key's claim {slot.claim}")
    _str(body.get("host"), "host", 253, pattern=HOST_RE)
    _str(body.get("fqdn"), "fqdn", 253, optional=True, pattern=HOST_RE)
    _addr(body.get("addr"), "addr")
    _int(body.get("probe_port"), "probe_port", 1, 65535)
    _int(body.get("pid"), "pid", 0, 2**31)
    _str(body.get("boot_id"), "boot_id", 64, optional=True)
    _str(body.get("tool_version"), "tool_version", 64)
    _str(body.get("launcher"), "launcher", 32, optional=True)
    _str(body.get("fresh"), "fresh", 64, pattern=HEX_RE)
    launch = body.get("launch")
    _dict(launch, "launch")
    _int(launch.get("nnodes"), "launch.nnodes", 1, ctx["max_nodes"], optional=True)
    _int(launch.get("nproc_per_node"), "launch.nproc_per_node", 1, 4096, optional=True)
    _str(launch.get("rdzv_id"), "launch.rdzv_id", 256, optional=True)
    _str(launch.get("endpoint"), "launch.endpoint", 300)
    checks = body.get("checks")
    _need(isinstance(checks, list) and len(checks) <= 256, "checks is not a list of at most 256 names")
    for c in checks:
        _str(c, "checks[]", 64)


def check_roster(body: dict, ctx: dict) -> None:
    status = body.get("status")
    _need(status in ("ok", "aborted"), "status is neither ok nor aborted")
    if status == "aborted":
        _str(body.get("message"), "message", 16 * KIB)
        return
    nodes = body.get("nodes")
    _need(isinstance(nodes, list) and 1 <= len(nodes) <= ctx["nnodes"] * MAX_CLAIMS, "nodes is not a list of nodes")
    for n in nodes:
        _dict(n, "nodes[]")
        check_ident(n, dict(ctx, slot=Slot(n.get("rank", -1), n.get("claim", -1))))
        _str(n.get("name"), "nodes[].name", 400)
    _str(body.get("master"), "master", 400)
    _dict(body.get("rejected"), "rejected")
    auth = body.get("auth", {})
    _dict(auth, "auth")
    _need(isinstance(auth.get("open_ranks", []), list), "auth.open_ranks is not a list")


def check_shared(body: dict, ctx: dict) -> None:
    _str(body.get("nonce"), "nonce", 4 * KIB)
    _str(body.get("file"), "file", 255)


def check_facts(body: dict, ctx: dict) -> None:
    _dict(body.get("facts"), "facts")
    _dict(body.get("gather"), "gather")
    for name, outcome in body["gather"].items():
        _dict(outcome, f"gather.{name}")


def check_go(body: dict, ctx: dict) -> None:
    _need(isinstance(body.get("go"), bool), "go is not true/false")
    _str(body.get("reason"), "reason", 4 * KIB)


LEVELS = ("pass", "warn", "fail", "skip")


def check_result(r: Any, field: str) -> None:
    """One result as the renderers read it: a forged ``["x"]`` or ``[{}]`` is refused here, not a crash later."""
    _dict(r, field)
    _str(r.get("check"), f"{field}.check", 128)
    _need(r.get("level") in LEVELS, f"{field}.level is not one of {'/'.join(LEVELS)}")
    _str(r.get("summary"), f"{field}.summary", 64 * KIB)
    nodes = r.get("nodes", [])
    _need(isinstance(nodes, list) and all(isinstance(n, str) for n in nodes), f"{field}.nodes is not a list of names")
    _str(r.get("fix", ""), f"{field}.fix", 64 * KIB, optional=True)


def check_verdict(body: dict, ctx: dict) -> None:
    _need(body.get("verdict") in ("pass", "warn", "fail"), "verdict is not pass/warn/fail")
    _int(body.get("exit_code"), "exit_code", ExitCode.OK, ExitCode.INTERNAL)
    results = body.get("results")
    _need(isinstance(results, list), "results is not a list")
    for i, r in enumerate(results[:100_000]):
        check_result(r, f"results[{i}]")
    _dict(body.get("nodes"), "nodes")
    for name, node in body["nodes"].items():
        _dict(node, f"nodes.{str(name)[:40]}")
    master = body.get("master")
    if master is not None:  # where the master printed the summary and wrote the cluster result
        _dict(master, "master")
        _str(master.get("node"), "master.node", 400)
        _str(master.get("host"), "master.host", 253, pattern=HOST_RE)
        _str(master.get("output_dir"), "master.output_dir", 4096, optional=True)
    advice = body.get("advice", [])
    _need(isinstance(advice, list) and all(isinstance(a, str) for a in advice), "advice is not a list of lines")
    _dict(body.get("auth", {}), "auth")


def check_beat(body: dict, ctx: dict) -> None:
    _int(body.get("n"), "n", 0, 2**31)


def check_done(body: dict, ctx: dict) -> None:
    _need(body.get("done") is True, "done is not true")


@dataclass(frozen=True)
class Kind:
    """One kind of message: where it lives, who may send it, how big it may be, what it must contain."""

    template: str  # formatted with slot=Slot
    from_master: bool  # True: only node rank 0 sends it; False: the slot in the key sends it
    cap: Callable[[int], int]  # byte cap, given nnodes
    check: Callable[[dict, dict], None]


# The one table of keys. Counters (claims, heartbeats, arrivals) are plain integers beside these.
KINDS: dict[str, Kind] = {
    "hello": Kind("hello", True, lambda n: 4 * KIB, check_hello),
    "ident": Kind("ident/{slot.rank}/{slot.claim}", False, lambda n: 16 * KIB, check_ident),
    "roster": Kind("roster", True, lambda n: min(7 * MIB, 64 * KIB + n * 4 * KIB), check_roster),
    "shared": Kind("shared-nonce", True, lambda n: 8 * KIB, check_shared),
    # each message is one request to the store: under torch's 8 MiB limit with room for the envelope
    "facts": Kind("facts/{slot}", False, lambda n: 6 * MIB, check_facts),
    "go": Kind("collective-go", True, lambda n: 8 * KIB, check_go),
    "cfacts": Kind("cfacts/{slot}", False, lambda n: 4 * MIB, check_facts),
    "verdict": Kind("verdict", True, lambda n: 7 * MIB, check_verdict),
    # "I have the verdict": sealed, not a counter, or one stray add would end the master's wait for the
    # readers and a node still polling would find the store gone
    "done": Kind("done/{slot}", False, lambda n: 1 * KIB, check_done),
    # the heartbeat: a sealed value replaced once a second (set, never add: see the module docstring)
    "beat": Kind("beat/{slot}", False, lambda n: 1 * KIB, check_beat),
}
COUNTERS = {"assign": "assign"}  # the one counter left: ranks by arrival (see PROTOCOL.md for its limits)
CLAIM_KEY = "claim/{rank}/{claim}"  # compare_set slots: the value is the claimer's fresh value
PER_NODE_CAP = 32 * MIB  # all of one sender's messages together


def key_of(kind: str, slot: Slot | None = None) -> str:
    return KINDS[kind].template.format(slot=slot)


# ----------------------------------------------------------------------------------------------------
# Sealing: pure functions over dicts and bytes (unit-tested without a store).


def sealed_name(secret: str, run: str, key: str) -> str:
    """The store key a sealed run uses for ``key``: unknown to anyone without the secret until it exists."""
    tag = hmac.new(secret.encode(), f"name/{run}/{key}".encode(), hashlib.sha256).hexdigest()[:24]
    return f"{key}~{tag}"


def key_id(secret: str, run: str) -> str:
    """What the hello says about the run's key file: lets a node tell this run's key from a stale one."""
    return hmac.new(secret.encode(), f"key-id/{run}".encode(), hashlib.sha256).hexdigest()[:32]


def _mac(token: str, run: str, key: str, sender: Slot, body: str) -> str:
    covered = json.dumps([PROTOCOL, run, key, sender.rank, sender.claim, body], separators=(",", ":"))
    return hmac.new(token.encode(), covered.encode(), hashlib.sha256).hexdigest()


def seal(body: dict, *, token: str | None, run: str, key: str, sender: Slot) -> bytes:
    """The envelope as one ASCII line (ensure_ascii: no raw newline can break the framing)."""
    text = json.dumps(body, separators=(",", ":"), default=str, allow_nan=False)
    env = {"v": PROTOCOL, "run": run, "key": key, "from": [sender.rank, sender.claim], "body": text,
           "sig": _mac(token, run, key, sender, text) if token else ""}
    return json.dumps(env, separators=(",", ":")).encode()


def open_envelope(frame: bytes, *, token: str | None, run: str | None, key: str, sender: Slot | None,
                  from_master: bool, blind: bool = False) -> tuple[Slot, dict]:
    """Verify and decode one frame. ``run`` None accepts any run (only for the hello that carries it).
    ``blind``: a node without the run's key (unauthenticated, and it says so) takes a signed frame it cannot
    verify. Raises Invalid with the reason; the signature is checked before the body is parsed."""
    try:
        env = json.loads(frame.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Invalid("not an ASCII JSON envelope") from None
    _need(isinstance(env, dict) and set(env) == {"v", "run", "key", "from", "body", "sig"}, "not an envelope")
    _need(env["v"] == PROTOCOL, f"protocol version {env['v']!r} is not {PROTOCOL}")
    _need(isinstance(env["run"], str) and isinstance(env["body"], str) and isinstance(env["sig"], str),
          "envelope fields have the wrong types")
    frm = env["from"]
    _need(isinstance(frm, list) and len(frm) == 2 and all(_is_int(x) for x in frm), "from is not [rank, claim]")
    who = Slot(*frm)
    _need(env["key"] == key, f"sealed for key {env['key'][:80]!r}, stored under {key!r}")
    if from_master:
        _need(who.rank == 0, f"sent by rank {who.rank}, only the master (rank 0) sends {key!r}")
    elif sender is not None:
        _need(who == sender, f"sent by {who}, the key belongs to {sender}")
    if blind:
        pass
    elif token:
        _need(bool(env["sig"]), "unsigned, and this node requires --token")
        _need(hmac.compare_digest(_mac(token, env["run"], key, who, env["body"]), env["sig"]),
              "signature does not match this node's token")
    else:
        _need(not env["sig"], "signed with a token, and this node has none (pass the same --token on every node)")
    _need(run is None or env["run"] == run, "sealed for another run (a replayed message)")
    try:
        body = json.loads(env["body"])
    except (ValueError, RecursionError):
        raise Invalid("body is not JSON") from None
    _need(isinstance(body, dict), "body is not an object")
    return who, body


def frames(blob: bytes, limit_bytes: int | None = None) -> list[bytes]:
    """Split an appended value into frames; junk without newlines spoils only itself. ``limit_bytes``: only
    the frames that start within that many bytes (reading past junk is bounded by bytes, not by a count a
    writer can fill with small frames)."""
    if limit_bytes is not None:
        blob = blob[:limit_bytes]
    return [f for f in blob.split(b"\n") if f.strip()]


# ----------------------------------------------------------------------------------------------------
# The mailbox over a live store.


@dataclass
class Finding:
    """An invalid message that was ignored: where, what it claimed to be, and why it was refused."""

    key: str
    why: str
    claimed: str = ""  # the sender's self-description, when the frame got far enough to have one

    def to_json(self) -> dict:
        return {"key": self.key, "why": self.why, "claimed": self.claimed}


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
        self.findings.append(Finding(key=key, why=why, claimed=_claimed(frame)))

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


def _claimed(frame: bytes) -> str:
    """Best effort, for the finding only: the host and address an invalid message says it came from."""
    try:
        env = json.loads(frame[:64 * KIB].decode("ascii"))
        body = json.loads(env["body"])
        host, addr = str(body.get("host", ""))[:64], str(body.get("addr", ""))[:64]
        rank = env.get("from", ["?"])[0]
        return f"rank {rank} host {host!r} addr {addr!r}" if host or addr else f"rank {rank}"
    except Exception:  # noqa: BLE001 - a frame that is not even an envelope claims nothing
        return ""


# What each key holds, in a user's words: a message a person reads (a progress line, a finding, an error)
# names a key this way, never by the protocol's own name (issue 20); the keys themselves are the protocol's.
ABOUT = {
    "hello": "the master's first message (this run's id)",
    "ident": "node rank {rank}'s identity",
    "roster": "the list of nodes that joined",
    "shared-nonce": "the shared-directory test's file name",
    "facts": "node rank {rank}'s check results",
    "collective-go": "the master's go-ahead for the collective test",
    "cfacts": "node rank {rank}'s collective test results",
    "verdict": "the verdict",
    "done": "node rank {rank}'s receipt of the verdict",
    "assign": "the count of nodes that took a rank",
    "claim": "the claims on node rank {rank}",
    "beat": "node rank {rank}'s heartbeat",
}


def about(key: str) -> str:
    """A store key in a user's words: "cfacts/2.1" -> "node rank 2's collective test results"; a key no node
    writes (a stranger's) -> "a message ddpdoctor does not write"."""
    head, _, rest = str(key).partition("/")
    text = ABOUT.get(head)
    if text is None:
        return "a message ddpdoctor does not write"
    rank = re.split(r"[/.]", rest)[0] if rest else ""
    return text.format(rank=rank if rank.isdigit() else "?")
