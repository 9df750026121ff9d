"""A known-good run as the explicit reference of a new one (preflight --baseline FILE).

Without a reference, a difference between nodes is judged by the majority, and two nodes (or 2 against 2)
have none. A baseline says which values are right: its nodes' comparables (``Check.comparable``: what must
agree across nodes), less what each check declares as belonging to one run (``Check.per_run_keys``: job
ids, the master's address, the checks selected), so a node, or a whole cluster, that differs from a
known-good run is named whatever the count.

The file is read under the input policy (``documents.load``: size cap, UTF-8, bounded JSON depth, the
preflight document's shape; any problem is one line naming the file, exit 2). The reference travels in the
run settings as ``run["baseline"]`` (``{"file", "nodes", "verdict", "comparable": {check: {key: [values]}}}``),
so it reaches every check's compare through its ``opts`` (read with ``api.baseline_values``); nothing here
knows a check by name.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Mapping

from .errors import UsageError


def load(path: str) -> dict:
    """The reference of the preflight result at ``path`` (a master's cluster.json or a node's node-HOST.json)."""
    from . import documents, exports, registry

    doc = documents.load(path)
    if doc["kind"] != "preflight":
        raise UsageError(f"{path}: a {doc['kind']} result, not a preflight one: pass the cluster.json (or "
                         f"node-HOST.json) that a preflight of a known-good run wrote")
    per_run = {lc.name: tuple(getattr(lc.check, "per_run_keys", ()) or ()) for lc in registry.discover()}
    accepted: dict[str, dict[str, list[Any]]] = {}
    used = []
    for name, data in sorted(doc["nodes"].items()):
        comparable = exports.node_comparable(data)
        if not isinstance(comparable, Mapping) or not comparable:
            continue
        used.append(name)
        for check, values in comparable.items():
            if not isinstance(values, Mapping):
                continue
            for key, value in values.items():
                if any(fnmatchcase(str(key), pattern) for pattern in per_run.get(check, ())):
                    continue
                seen = accepted.setdefault(str(check), {}).setdefault(str(key), [])
                if value not in seen:
                    seen.append(value)
    if not used:
        raise UsageError(f"{path}: no node in it carries the facts to compare with (a worker's node-*.json "
                         f"holds only the master's verdict): pass the master's cluster.json, or the node-HOST.json "
                         f"of a one-node preflight")
    return {"file": str(path), "nodes": used, "verdict": doc.get("verdict"), "comparable": accepted}

