"""Where is it slow: intra-node vs inter-node figures, and the bad-node hunt by pairs of nodes.

Round 1 benchmarks disjoint pairs of nodes at once; a pair under ``threshold`` × the median (or a MAD outlier)
is suspect. Round 2 pairs every node of a suspect pair with a node from a good pair (twice, the best figure
kept: worker.RETESTS): a node that is slow again is named, with its figure; a node that is fine now only had a
slow partner, and so had one whose retest dipped too but stayed far above its partner's (noise beside the node
that explains the pair). ``judge`` is pure, so the rule is tested with plain numbers.
"""
from __future__ import annotations

import statistics


def outliers(values: dict[str, float], threshold: float = 0.8) -> list[str]:
    """Keys whose value is below threshold × median, or more than 3 MADs below the median."""
    if len(values) < 2:
        return []
    med = statistics.median(values.values())
    mad = statistics.median(abs(v - med) for v in values.values())
    low = []
    for key, v in values.items():
        if v < threshold * med or (mad > 0 and (med - v) / (1.4826 * mad) > 3.0):
            low.append(key)
    return sorted(low)


def pairings(nodes: list[str]) -> list[tuple[str, str]]:
    """Disjoint pairs; with an odd count the last node is paired with the first (it runs a second time)."""
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2 == 1 and len(nodes) > 1:
        pairs.append((nodes[-1], nodes[0]))
    return pairs


def retest_pairings(round1: dict[tuple[str, str], float], suspects: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each node of a suspect pair against a distinct node from a good pair (disjoint, so they run at once)."""
    good = [n for pair in round1 if pair not in suspects for n in pair]
    out = []
    for pair in suspects:
        for node in pair:
            if not good:
                return out
            out.append((node, good.pop(0)))
    return out


def judge(round1: dict[tuple[str, str], float], round2: dict[tuple[str, str], float],
          threshold: float = 0.8) -> dict:
    """The localisation verdict: which nodes are slow, with their figures and the median they missed."""
    labels = {f"{a}+{b}": (a, b) for a, b in round1}
    low = [labels[k] for k in outliers({f"{a}+{b}": v for (a, b), v in round1.items()}, threshold)]
    med = statistics.median(round1.values()) if round1 else 0.0
    suspects = []
    for pair in low:
        slow = {}
        for node in pair:
            retests = {p: v for p, v in round2.items() if p[0] == node}
            if retests and all(v < threshold * med for v in retests.values()):
                slow[node] = retests
        for node, retests in slow.items():
            if _outdone(node, slow, threshold, med):
                continue
            suspects.append({"node": node, "busbw_gbs": round(min(retests.values()), 4), "median_gbs": round(med, 4),
                             "retest": [{"nodes": list(p), "busbw_gbs": round(v, 4)} for p, v in retests.items()]})
    return {"threshold": threshold, "median_gbs": round(med, 4),
            "pairs": [{"nodes": list(p), "busbw_gbs": round(v, 4), "suspect": p in low} for p, v in round1.items()],
            "retests": [{"nodes": list(p), "busbw_gbs": round(v, 4)} for p, v in round2.items()],
            "suspects": suspects,
            "unexplained": [list(p) for p in low if not any(s["node"] in p for s in suspects)]}



def _outdone(node: str, slow: dict[str, dict], threshold: float, med: float) -> bool:
    """Both nodes of a suspect pair retested slow, and this one is far faster than its partner (its figure over
    1/threshold x the partner's): the partner explains the pair, and this node's dip is the noise of a loaded
    host (seen on 2 cores: 0.040 GB/s against a median of 0.061, beside its partner's 0.001). Two nodes that
    are both slow measure alike and are both named, and so is one far under the median whatever its partner
    measured (a dip is noise only near the threshold: over half of it)."""
    mine = min(slow[node].values())
    if mine < 0.5 * threshold * med:
        return False
    return any(min(r.values()) < threshold * mine for other, r in slow.items() if other != node)
