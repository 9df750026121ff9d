"""Signed JSON messages between nodes: HMAC-SHA256 over the exact JSON text, keyed by the shared token.

Facts travel as JSON text, never pickle. Without a token messages are still wrapped the same way (an
empty signature), so a node with a token and one without are told apart: that is a rejection too.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any


class BadSignature(Exception):
    """The message was signed with another token, or not signed while a token is required."""


def seal(payload: Any, token: str | None) -> bytes:
    text = json.dumps(payload, separators=(",", ":"), default=str)
    sig = hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest() if token else ""
    return json.dumps({"payload": text, "sig": sig}, separators=(",", ":")).encode()


def unseal(blob: bytes, token: str | None, *, verify: bool = True) -> Any:
    """Decode a sealed message; with ``verify`` a signature mismatch raises BadSignature.

    ``verify=False`` still returns the payload, so the master can name the node it rejects.
    """
    outer = json.loads(blob.decode())
    text = outer["payload"]
    if verify:
        expected = hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest() if token else ""
        if not hmac.compare_digest(expected, outer.get("sig", "")):
            raise BadSignature("signature does not match this node's token")
    return json.loads(text)
