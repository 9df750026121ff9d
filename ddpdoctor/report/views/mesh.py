"""The reachability view: probed links with their round trips as a grid or a heatmap, the failed and the
slowest links (pure). Links come from the contract's "links" export of any check."""
from __future__ import annotations

import heapq
import math
from typing import Any

from ...exports import exported
from .common import _finite, _natural


MATRIX_FULL = 64  # reachability drawn as a table of round trips up to this many nodes; above, a heatmap


def rtt_text(ms: float) -> str:
    """A round trip in a narrow cell: .21 (ms), 1.3, 12, 340, 2.1k."""
    if ms < 1:
        return f"{ms:.2f}".lstrip("0") if ms >= 0.01 else "<.01"
    if ms < 10:
        return f"{ms:.1f}"
    if ms < 1000:
        return f"{ms:.0f}"
    return f"{ms / 1000:.1f}k"


def reachability(nodes: dict[str, dict], labels: dict[str, str] | None = None) -> dict:
    """Probed links with their round trip; a grid up to MATRIX_FULL nodes (cells: ok with the round trip in
    ms, slow, failed, not probed, self), the failed and the slowest links at any size."""
    names = sorted(nodes, key=_natural)
    links: dict[tuple[str, Any], tuple[str, float | None]] = {}
    for src in names:
        for p in exported(nodes[src], "links") or []:
            if not isinstance(p, dict):
                continue
            rtt = p.get("rtt_ms") if _finite(p.get("rtt_ms")) else None
            links[(src, p.get("peer"))] = ("ok" if p.get("ok") is True else str(p.get("error_class") or "failed"), rtt)
    if not links:
        return {"nodes": [], "grid": [], "failed": [], "probed": 0, "slowest": [], "median_ms": None}
    rtts = sorted(r for c, r in links.values() if c == "ok" and r is not None)
    median = rtts[len(rtts) // 2] if rtts else None
    slow_ms = max(3 * median, median + 1.0) if median is not None else None
    failed = [{"src": s, "dst": d, "class": c} for (s, d), c in
              sorted(((k, c) for k, (c, _) in links.items() if c != "ok"), key=lambda kv: kv[0])]
    slowest = heapq.nlargest(8, ((r, s, d) for (s, d), (c, r) in links.items() if c == "ok" and r is not None),
                             key=lambda t: t[0])
    grid, cells = [], []
    if len(names) > MATRIX_FULL:  # a heatmap (svg.heatmap): one square per probed link, no text in it
        index = {n: i for i, n in enumerate(names)}
        limit = slow_ms if slow_ms is not None else math.inf
        for (s, d), (state, rtt) in links.items():
            j = index.get(d)
            if j is None:
                continue
            if state == "ok" and (rtt is None or rtt <= limit):
                cells.append((index[s], j, "ok", ""))  # drawn as one path, no tooltip: thousands of them
                continue
            kind = "slow" if state == "ok" else "bad"
            cells.append((index[s], j, kind, f"{s} → {d}: " + (f"{rtt:.3g} ms" if kind == "slow" else state)))
    if len(names) <= MATRIX_FULL:
        for s in names:
            row = []
            for d in names:
                state, rtt = links.get((s, d), ("self" if s == d else "none", None))
                if state == "ok":
                    slow = slow_ms is not None and rtt is not None and rtt > slow_ms
                    row.append({"state": "slow" if slow else "ok", "text": rtt_text(rtt) if rtt is not None else "ok",
                                "title": f"{s} → {d}: " + (f"{rtt:.3g} ms" if rtt is not None else "reachable")})
                elif state == "self":
                    row.append({"state": "self", "text": "", "title": f"{s} (itself)"})
                elif state == "none":
                    row.append({"state": "none", "text": "", "title": f"{s} → {d}: not probed"})
                else:
                    row.append({"state": "bad", "text": state if len(names) <= 12 else "✕",
                                "title": f"{s} → {d}: {state}"})
            grid.append(row)
    size = "s" if len(names) <= 12 else "m" if len(names) <= 32 else "l"  # the table's cell size (report.css)
    return {"nodes": names if grid else [], "labels": [(labels or {}).get(n, n) for n in names] if grid else [],
            "grid": grid, "size": size, "heatmap": {"labels": [(labels or {}).get(n, n) for n in names],
                                                   "cells": cells} if cells else None,
            "failed": failed, "probed": len(links), "median_ms": median, "slow_ms": slow_ms,
            "slowest": [{"src": s, "dst": d, "rtt_ms": r} for r, s, d in slowest]}
