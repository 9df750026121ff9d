"""The protocol's message types: every key a node reads or writes, who may send it, its byte cap, and the
validation its body must pass (``KINDS``), plus each key in a user's words (``about``).

The records are few and flat; a schema library would be a dependency for a dozen lines. Nothing here
touches a store or a secret: the envelope (envelope.py) seals and opens frames, the mailbox (mailbox.py)
moves them.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..exitcodes import ExitCode
from ..numbers import parse_int

PROTOCOL = 1
MAX_CLAIMS = 16  # claims of one rank read by the master: more is a flood, not a cluster
KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Slot:
    """Who sends: a node rank and the claim number it got for that rank (two nodes may claim one rank)."""

    rank: int
    claim: int

    def __str__(self) -> str:
        return f"{self.rank}.{self.claim}"



# DNS: labels <= 63. \Z, not $: '$' also matches before a final newline ('host\n' was a host name)
HOST_RE = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?\Z")
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



def check_exchange(body: dict, ctx: dict) -> None:
    """What the master's checks published for every node to answer: {check name: a JSON object}."""
    values = body.get("values")
    _dict(values, "values")
    _need(len(values) <= 256, "values has more than 256 checks")
    for name, value in values.items():
        _str(name, "values[]", 64)
        _dict(value, f"values.{name[:40]}")


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
    # the exchange step: what the master's checks publish for every node to answer (api.Check.publish)
    "exchange": Kind("exchange", True, lambda n: 16 * KIB, check_exchange),
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


def key_of(kind: str, slot: Slot | None = None) -> str:
    return KINDS[kind].template.format(slot=slot)



@dataclass
class Finding:
    """An invalid message that was ignored: where, what it claimed to be, and why it was refused."""

    key: str
    why: str
    claimed: str = ""  # the sender's self-description, when the frame got far enough to have one

    def to_json(self) -> dict:
        return {"key": self.key, "why": self.why, "claimed": self.claimed}


# What each key holds, in a user's words: a message a person reads (a progress line, a finding, an error)
# names a key this way, never by the protocol's own name (issue 20); the keys themselves are the protocol's.
ABOUT = {
    "hello": "the master's first message (this run's id)",
    "ident": "node rank {rank}'s identity",
    "roster": "the list of nodes that joined",
    "exchange": "the values the master's checks published for every node to answer",
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
    return text.format(rank=rank if parse_int(rank, strip=False) is not None else "?")
