"""The envelope: sealing a message into one signed ASCII line and opening it again, pure functions over
dicts and bytes (unit-tested without a store).

The HMAC (with a secret: ``--token`` or the run's key file) covers the run's nonce, the key the message is
stored under, the sender's slot (node rank and claim) and the body; so a message from another run, another
key or another sender never verifies. Messages are appended to their key as newline-framed lines
(``frames``): junk without newlines spoils only itself. A sealed run also stores its keys under names only
the secret's holders can compute (``sealed_name``).
"""
from __future__ import annotations

import hashlib
import hmac
import json

from .messages import KIB, PROTOCOL, Invalid, Slot, _is_int, _need, about


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
    _need(env["key"] == key, f"a copy of {about(env['key'])}, stored under the name of {about(key)}")
    if from_master:
        _need(who.rank == 0, f"sent by node rank {who.rank}, and only the master (node rank 0) sends {about(key)}")
    elif sender is not None:
        _need(who == sender, f"sent by node rank {who.rank} (claimant {who.claim}), the key belongs to node rank "
                             f"{sender.rank} (claimant {sender.claim})")
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



def claimed_by(frame: bytes) -> str:
    """Best effort, for the finding only: the host and address an invalid message says it came from."""
    try:
        env = json.loads(frame[:64 * KIB].decode("ascii"))
        body = json.loads(env["body"])
        host, addr = str(body.get("host", ""))[:64], str(body.get("addr", ""))[:64]
        rank = env.get("from", ["?"])[0]
        return f"rank {rank} host {host!r} addr {addr!r}" if host or addr else f"rank {rank}"
    except Exception:  # noqa: BLE001 - a frame that is not even an envelope claims nothing
        return ""

