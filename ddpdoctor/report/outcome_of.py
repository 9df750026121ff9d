"""A run document's ``outcome`` as the renderers read it (judge/outcome.py, ``Outcome.to_json``): its state, the
ranks it names and what the root-cause box is called, decided on the Outcome, worded by the views. A document
written before ``outcome`` existed is read from its older keys (verdict, root_cause, culprit_ranks), the same way."""
from __future__ import annotations

PASSED = ("pass", "progressing")


def _outcome(doc: dict) -> dict | None:
    out = doc.get("outcome")
    return out if isinstance(out, dict) and isinstance(out.get("state"), str) else None


def _root(doc: dict) -> dict:
    root = doc.get("root_cause")
    return root if isinstance(root, dict) else {}


def state(doc: dict) -> str:
    """The outcome's state: pass, fail, hang, progressing, undecided, unverified or interrupted."""
    out = _outcome(doc)
    if out is not None:
        return out["state"]
    if doc.get("verdict") == "pass":
        return "pass"
    category = _root(doc).get("category")
    return "unverified" if category == "unverified" else "interrupted" if category == "interrupted" else "fail"


def passed(doc: dict) -> bool:
    return state(doc) in PASSED


def culprit_ranks(doc: dict) -> list | None:
    """The ranks the outcome names (the likely ones too); None: the document says nothing of culprits."""
    out = _outcome(doc)
    if out is not None:
        return [c.get("rank") for c in out.get("culprits") or [] if isinstance(c, dict)]
    ranks = doc.get("culprit_ranks")
    return ranks if isinstance(ranks, list) else None


def root_title(doc: dict) -> str:
    """What the root-cause box is called: a stop on request is neither a root cause nor a failure; a rank the
    outcome names only as the likely one is the likely root cause; with no rank named, a rank shown (the rank gloo aborted, one side of a tie, a rank that only lost its peer) is the first
    failure, and without one there is no culprit rank."""
    if state(doc) == "interrupted":
        return "stopped on request"
    ranks = culprit_ranks(doc)
    if ranks is not None and not ranks:
        return "first failure, no culprit named" if _root(doc).get("rank") is not None else "no culprit rank named"
    out = _outcome(doc)
    culprits = [c for c in (out or {}).get("culprits") or [] if isinstance(c, dict)]
    if culprits and not any(c.get("named") is not False for c in culprits):
        return "likely root cause"  # the records name the rank(s) only as the likely one(s)
    return "root cause"
