"""The clock chart's view: each node's offset from the master, its axis and the warning limit (pure).

Everything comes from the contract's "clock" export (api.EXPORTS: offset, error bound, limit), whichever
check exports it; a node is drawn as bad where that check warned or failed. No check is known by name.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from ...exports import exported, node_exports
from ..svg import plottable
from .common import _finite, _natural


def clock_checks(nodes: dict[str, dict]) -> set[str]:
    """The checks that export a node's clock (the contract's "clock" kind), whatever their names."""
    return {check for data in nodes.values() for check, e in node_exports(data).items()
            if isinstance(e, Mapping) and isinstance(e.get("clock"), Mapping)}


def clock_offsets(nodes: dict[str, dict], results: list[dict] | None = None,
                  labels: dict[str, str] | None = None) -> list[dict]:
    """Each node's offset from the master with its error bound (the "clock" export); ``bad``: a check that
    exports the clock warned or failed on that node."""
    sources = clock_checks(nodes)
    level: dict[str, str] = {}
    for r in results or []:
        if r.get("check") in sources and r.get("level") in ("warn", "fail"):
            for n in r.get("nodes") or []:
                level[n] = r["level"]
    out = []
    for name in sorted(nodes, key=_natural):
        f = exported(nodes[name], "clock")
        f = f if isinstance(f, dict) else {}
        off, bound = f.get("offset_ms"), f.get("bound_ms") or 0.0
        if _finite(off):
            out.append({"node": name, "label": (labels or {}).get(name, name), "offset_ms": off,
                        "bound_ms": bound if _finite(bound) else 0.0, "bad": name in level})
    return out


CLOCK_MIN_HALF_SPAN_MS = 0.5  # the axis never shows less than ±0.5 ms: a healthy NTP cluster reads as such


def nice_step(span: float, count: int = 4) -> float:
    """A step of 1, 2, 2.5 or 5 x 10^k giving about ``count`` intervals over ``span``."""
    raw = max(span, 1e-12) / count
    base = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5):
        if m * base >= raw * (1 - 1e-9):
            return m * base
    return 10 * base


def clock_axis(points: list[dict], limit: float | None, min_half: float = CLOCK_MIN_HALF_SPAN_MS) -> dict:
    """The clock chart's axis, ±half in ms, fitted to the offsets and their bounds (not to the limit, which
    would flatten sub-millisecond offsets). When a few bad nodes lie more than 10 x beyond the rest, the
    axis fits the rest and those are drawn at its edge with their figure (``clipped``)."""
    points = [p for p in points if plottable(p["offset_ms"]) and plottable(p["bound_ms"])]  # svg notes the rest
    if not points:
        return {"half": min_half, "step": nice_step(2 * min_half), "clipped": False, "limit_shown": False, "worst": ""}
    extent = [abs(p["offset_ms"]) + p["bound_ms"] for p in points]
    good = [e for e, p in zip(extent, points) if not p["bad"]]
    hi_good, hi = max(good + [min_half]), max(extent + [min_half])
    clipped = hi > 10 * hi_good and len(good) >= len(points) / 2
    half = hi_good if clipped else hi
    step = nice_step(2 * half)
    half = math.ceil(half / step - 1e-9) * step
    far = max(points, key=lambda p: abs(p["offset_ms"]))
    return {"half": half, "step": step, "clipped": clipped, "limit_shown": bool(limit and limit <= half),
            "worst": f"{far['node']} {far['offset_ms']:+.3f} ms ± {far['bound_ms']:.3f}"}


def clock_limit(nodes: dict[str, dict], default: float = 100.0) -> float:
    """The warning limit the run's clock check used, as its "clock" export says (``limit_ms``); ``default``
    for documents written before the export carried it."""
    for name in sorted(nodes, key=_natural):
        f = exported(nodes[name], "clock")
        limit = f.get("limit_ms") if isinstance(f, dict) else None
        if _finite(limit) and limit > 0:
            return float(limit)
    return default
