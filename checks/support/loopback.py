"""Which loopback a process sees: nodes with the same scope (one machine, one network namespace) share 127.x,
so a loopback address one of them advertises reaches the others (torchrun's or --local-nodes' nodes on one host)."""
from __future__ import annotations

import hashlib
import os


def loopback_scope() -> str | None:
    """The kernel's boot id and this process's network namespace, hashed; None where /proc does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return None
    return hashlib.sha256(f"{boot}/{netns}".encode()).hexdigest()[:16]


def sharing_loopback(facts_by_node: dict) -> int:
    """How many of these nodes share one loopback: all of them when every node's facts carry the same
    ``loopback_scope``, else 1 (each node its own, or unknown)."""
    scopes = {f.get("loopback_scope") if isinstance(f, dict) else None for f in facts_by_node.values()}
    return len(facts_by_node) if len(scopes) == 1 and None not in scopes else 1
