"""Findings grouped across nodes: the same problem on many nodes is one entry naming the nodes compactly.

Checks report per node ("gloo allreduce on node07: ..."); a cluster of 4,096 nodes would print a panel per
node. A group is the results of one check and level whose text is the same once the node's own name and
the numbers are masked, so "node03 has 2 GPUs" and "node09 has 2 GPUs" group, while "node03 misses
NCCL_SOCKET_IFNAME" and "node03 has 2 GPUs" do not. Pure functions over result dicts: the terminal, the
JSON document and the HTML report show the same groups.
"""
from __future__ import annotations

import re
from typing import Iterable

from .numbers import parse_int

SEVERITY = {"fail": 3, "warn": 2, "skip": 1, "pass": 0}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def compress_hosts(names: Iterable[str]) -> str:
    """``node01,node02,node03,node07`` -> ``node[01-03,07]``; names without a trailing number stay as they
    are. The SLURM hostlist form, so a user can paste it into ``scontrol show hostnames``."""
    names = sorted(set(names), key=_natural)
    families: dict[tuple[str, str], list[str]] = {}
    plain: list[str] = []
    for name in names:
        m = re.match(r"^(.*?)([0-9]+)([^0-9]*)$", name)
        if not m:
            plain.append(name)
            continue
        prefix, digits, suffix = m.groups()
        families.setdefault((prefix, suffix), []).append(digits)
    groups: dict[tuple[str, str, int], list[str]] = {}
    for (prefix, suffix), all_digits in families.items():
        # zero-padded names (node007 ... node511) are one family of one width; unpadded ones (n9, n10) too
        padded = any(d.startswith("0") and len(d) > 1 for d in all_digits)
        for d in all_digits:
            groups.setdefault((prefix, suffix, len(d) if padded else 0), []).append(d)
    parts = list(plain)
    for (prefix, suffix, _), nums in groups.items():
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]}{suffix}")
        else:
            parts.append(f"{prefix}[{number_ranges(nums)}]{suffix}")
    return ",".join(sorted(parts, key=_natural))


def number_ranges(digits: list[str], sep: str = ",") -> str:
    """["01", "02", "03", "07"] -> "01-03,07": consecutive numbers as ranges, their text (padding) kept."""
    values = sorted(digits, key=int)
    out, start, prev = [], values[0], values[0]
    for d in values[1:]:
        if int(d) == int(prev) + 1:
            prev = d
            continue
        out.append(start if start == prev else f"{start}-{prev}")
        start = prev = d
    out.append(start if start == prev else f"{start}-{prev}")
    return sep.join(out)


def rank_ranges(ranks: Iterable) -> str:
    """[0, 1, 2, 3, 8, 9] -> "0-3, 8, 9": three or more consecutive ranks as a range, so a dump that claims
    65,536 ranks is one short line ("3-65535"), not thousands; what is not an int is listed after them as it is."""
    def is_int(r) -> bool:
        return isinstance(r, int) and not isinstance(r, bool)

    ranks = list(ranks)
    runs: list[list[int]] = []
    for r in sorted({r for r in ranks if is_int(r)}):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ", ".join(parts + [str(r) for r in ranks if not is_int(r)])


def rank_values(values: dict, few: int = 16) -> str:
    """{"0": 3, "1": 2} -> 'rank 0: 3, rank 1: 2'; more than ``few`` ranks: those of one value together, in
    ranges ('rank(s) 0-1: 3, rank(s) 2-65535: 2')."""
    if len(values) <= few:
        return ", ".join(f"rank {r}: {v}" for r, v in sorted(values.items(), key=lambda x: _natural(str(x[0]))))
    by_value: dict = {}
    for r, v in values.items():
        number = parse_int(r, strip=False)
        by_value.setdefault(str(v), []).append(r if number is None else number)
    return ", ".join(f"rank(s) {rank_ranges(rs)}: {v}" for v, rs in by_value.items())


def _natural(text: str) -> list:
    # ASCII digit runs only ('²' is a digit to \d and isdigit(), not to int()): the odd pieces of the split
    return [int(t) if i % 2 else t for i, t in enumerate(re.split(r"([0-9]+)", text))]


def describe_nodes(nodes: list[str], total: int) -> str:
    """How a group names its nodes: "all 64 nodes", or the compact list."""
    if total > 1 and len(nodes) == total:
        return f"all {total} nodes"
    return compress_hosts(nodes)


def _shape(result: dict) -> tuple:
    """What must be equal for two results to be one finding: check, level, and the text with each node's
    own name and every number masked."""
    def mask(text) -> str:
        text = "" if text is None else str(text)
        for node in sorted(result.get("nodes") or [], key=len, reverse=True):
            text = text.replace(node, "\0")
        return _NUMBER.sub("#", text)

    return result["check"], result["level"], mask(result.get("summary")), mask(result.get("fix"))


def group_results(results: list[dict], total_nodes: int) -> list[dict]:
    """Groups, worst first: failures, then warnings, skips, passes; within a level the groups naming
    fewest nodes first (the odd node out matters more than the 63 that agree).

    A group: {check, level, summary (its first member's), fix, nodes, where, count, members (indices)}.
    Passing results of one check collapse into one group whatever their text."""
    groups: dict[tuple, dict] = {}
    for i, r in enumerate(results):
        key = (r["check"], "pass") if r["level"] == "pass" else _shape(r)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"check": r["check"], "level": r["level"], "summary": r.get("summary", ""),
                               "fix": r.get("fix", ""), "nodes": [], "members": []}
        g["members"].append(i)
        for n in r.get("nodes") or []:
            if n not in g["nodes"]:
                g["nodes"].append(n)
    out = list(groups.values())
    for g in out:
        g["count"] = len(g["members"])
        g["where"] = describe_nodes(g["nodes"], total_nodes) if g["nodes"] else ""
        common = _common_nodes(g, results)
        if common:
            # links a -> c and b -> c: "all 3 nodes" would hide c, the one node every finding names
            others = [n for n in g["nodes"] if n not in common]
            g["common"] = common
            g["where"] = f"{compress_hosts(common)} (with {describe_nodes(others, 0)})"
    out.sort(key=lambda g: (-SEVERITY.get(g["level"], 0),
                            len(g.get("common") or g["nodes"]) or 1e9 if g["level"] != "pass" else 0, g["check"]))
    return out


def _common_nodes(group: dict, results: list[dict]) -> list[str]:
    """The nodes named by every member of a group of findings about several nodes each (a link's two ends),
    when they are fewer than the group's nodes: the node the findings have in common. [] otherwise."""
    if group["count"] < 2 or group["level"] == "pass":
        return []
    named = [results[i].get("nodes") or [] for i in group["members"]]
    if any(len(nodes) < 2 for nodes in named):
        return []
    common = [n for n in group["nodes"] if all(n in nodes for nodes in named)]
    return common if len(common) < len(group["nodes"]) else []
