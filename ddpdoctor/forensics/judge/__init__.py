"""The one judge of a job that stopped: a wait-for graph over ranks, read from ``JobEvidence``.

``judge(evidence: JobEvidence) -> Verdict``. Used by the watchdog (live), postmortem (dumps and logs) and
attach; ``words.to_json`` turns the Verdict into run.json's ``hang.verdict`` document.
"""
from __future__ import annotations

from .graph import judge  # noqa: F401
from .verdict import Category, Consequence, Culprit, NoCulprit, Verdict  # noqa: F401
