"""The check contract as documents carry it: a node's exports and comparables, computed, lifted and read.

On a node, right after a gather, ``contract`` computes a check's ``exports`` and ``comparable`` of its facts
(JSON-safe, redacted); ``lift_contract`` moves them into the node's entry (``nodes[NODE]["exports"][CHECK]``,
``["comparable"][CHECK]``), where documents keep them. ``node_exports``/``node_comparable``/``exported`` are
how every other module (the verdict, the report, run-trainer's gate) reads them; for documents written
before the contract existed they are derived from the facts by the installed checks.

This module sits below the engine (runner, cluster, launch) and the renderer alike: it imports the plugin
API, the registry (to derive) and redaction, nothing that runs checks.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .api import Check
from .redaction import scrub


def _json_safe(obj: Any) -> Any:
    """Facts must survive JSON; coerce what a careless plugin returns (tuples, sets, paths, numbers)."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)



# ------------------------------------------------------------------------------------------ the contract
def contract(check: Check, facts: dict, *, redact: bool = True) -> dict:
    """{"exports", "comparable"} of one check's facts on its node (JSON-safe, redacted), or {"contract_error"}
    when the check's methods raise (a plugin's bug must not lose its facts). ``redact=False`` for facts read
    back from a document: they were redacted before they were written."""
    try:
        exports, comparable = check.exports(facts), check.comparable(facts)
        if not isinstance(exports, dict) or not isinstance(comparable, dict):
            raise TypeError("exports() and comparable() return dicts")
    except Exception as exc:  # noqa: BLE001
        return {"contract_error": f"{type(exc).__name__}: {exc}"}
    clean = (lambda v: scrub(_json_safe(v))) if redact else _json_safe
    return {"exports": clean(exports), "comparable": clean(comparable)}


def lift_contract(nodes: Mapping[str, dict]) -> None:
    """Move each node's exports and comparables out of its gather outcomes into the node's entry, where
    documents keep them (nodes[NODE]["exports"][CHECK]); a contract error is kept beside them for
    ``compare_all`` to report. Entries that already carry them are left alone."""
    for data in nodes.values():
        if not isinstance(data, dict):
            continue
        for name, outcome in (data.get("gather") or {}).items():
            if not isinstance(outcome, dict):
                continue
            for key, where in (("exports", "exports"), ("comparable", "comparable"),
                               ("contract_error", "contract_errors")):
                if key in outcome:
                    data.setdefault(where, {})[name] = outcome.pop(key)


def _installed_checks() -> dict[str, Check]:
    from .registry import installed  # the installed checks, for documents written before the contract

    return installed()


def _derived(data: Mapping, key: str) -> dict[str, Any]:
    """A node's exports or comparables, by check: the entry's own, else its gather outcomes', else derived
    from its facts by the installed checks (a document written before the contract existed)."""
    if not isinstance(data, Mapping):
        return {}
    if isinstance(data.get(key), Mapping):
        return dict(data[key])
    out: dict[str, Any] = {}
    outcomes = data.get("gather") if isinstance(data.get("gather"), Mapping) else {}
    facts = data.get("facts") if isinstance(data.get("facts"), Mapping) else {}
    for name in sorted(set(outcomes) | set(facts)):
        outcome = outcomes.get(name)
        if isinstance(outcome, Mapping) and key in outcome:
            out[name] = outcome[key]
        elif isinstance(facts.get(name), dict) and name in _installed_checks():
            out[name] = contract(_installed_checks()[name], facts[name], redact=False).get(key, {})
    if isinstance(data, dict) and facts:
        data[key] = out  # derived once per node and document: a 512-node report asks for each many times
    return out


def node_exports(data: Mapping) -> dict[str, dict]:
    """{check: exports} of one node's entry in a document (or on the wire)."""
    return _derived(data, "exports")


def node_comparable(data: Mapping) -> dict[str, dict]:
    """{check: {key: value}} of one node's entry in a document (or on the wire)."""
    return _derived(data, "comparable")


# The vocabulary's kinds that are lists of records; every other kind is one record (api.EXPORTS).
LIST_KINDS = {"links": "peer"}


def _conform(kind: str, value: Any) -> Any:
    """An export as its kind's declared shape, or None: a document may come from another version or be
    damaged, and readers index what they get (a link's peer is a key of the report's matrix)."""
    if value is None:
        return None
    if kind in LIST_KINDS:
        key = LIST_KINDS[kind]
        if not isinstance(value, list):
            return None
        return [x for x in value if isinstance(x, Mapping) and isinstance(x.get(key), str)]
    return value if isinstance(value, Mapping) else None


def exported(data: Mapping, kind: str) -> Any:
    """One kind of export (api.EXPORTS) of a node, merged across its checks in name order: dicts key by key
    (the first non-empty value wins), lists concatenated, anything else the first. None when no check has it."""
    found = [v for _, e in sorted(node_exports(data).items()) if isinstance(e, Mapping)
             for v in [_conform(kind, e.get(kind))] if v is not None]
    if not found:
        return None
    if all(isinstance(v, Mapping) for v in found):
        merged: dict[str, Any] = {}
        for v in found:
            for k, x in v.items():
                if merged.get(k) in (None, "") and x not in (None, ""):
                    merged[k] = x
                merged.setdefault(k, x)
        return merged
    if all(isinstance(v, list) for v in found):
        return [x for v in found for x in v]
    return found[0]
