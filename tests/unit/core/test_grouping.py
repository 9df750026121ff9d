"""Findings grouped across nodes: compact host lists, grouping rules, and a terminal that does not grow with N."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from ddpdoctor.grouping import compress_hosts, describe_nodes, group_results
from ddpdoctor.report.console import render_preflight


@pytest.mark.parametrize("names, text", [
    (["node01", "node02", "node03", "node07"], "node[01-03,07]"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["gpu1", "gpu2", "gpu10"], "gpu[1-2,10]"),
    (["vm@127.0.0.1", "vm@127.0.0.3"], "vm@127.0.0.[1,3]"),
    (["login", "node1"], "login,node1"),
    (["a"], "a"),
])
def test_compress_hosts_is_the_slurm_hostlist_form(names, text):
    assert compress_hosts(names) == text


def test_all_nodes_is_said_in_words():
    assert describe_nodes([f"n{i}" for i in range(64)], 64) == "all 64 nodes"
    assert describe_nodes(["n3"], 64) == "n3"


def result(check, level, node, summary, fix=""):
    return {"check": check, "level": level, "nodes": [node], "summary": summary, "fix": fix, "actual": None,
            "expected": None, "details": {}}


def test_same_problem_on_many_nodes_is_one_group_and_different_problems_are_not():
    rs = [result("gpu", "warn", f"node{i:02d}", f"node{i:02d} has 2 GPUs busy (pid {100 + i})") for i in range(5)]
    rs.append(result("gpu", "warn", "node03", "node03 misses NCCL_SOCKET_IFNAME"))
    rs.append(result("mesh", "fail", "node04", "link node04 -> node01 timed out"))
    groups = group_results(rs, 5)
    assert [(g["check"], g["level"], g["where"]) for g in groups] == [
        ("mesh", "fail", "node04"), ("gpu", "warn", "node03"), ("gpu", "warn", "all 5 nodes")]
    assert groups[2]["members"] == [0, 1, 2, 3, 4]


def synthetic_cluster(n: int, bad: int | None) -> dict:
    names = [f"node{i:04d}" for i in range(n)]
    results = []
    for nm in names:
        results.append(result("torch-build", "pass", nm, f"torch 2.13.0 on {nm}"))
        results.append(result("clock-sync", "warn", nm, f"clock not synchronised on {nm} (maxerror {len(nm)} us)",
                              fix="timedatectl set-ntp true"))
        results.append(result("mesh", "pass", nm, f"{n - 1} links from {nm} open"))
    if bad is not None:
        results.append(result("mesh", "fail", names[bad], f"link {names[bad]} -> node0000 timed out",
                              fix="allow TCP between job nodes"))
    order = {"fail": 0, "warn": 1, "pass": 3}
    results.sort(key=lambda r: order[r["level"]])
    return {"kind": "preflight", "scope": "cluster", "verdict": "fail" if bad is not None else "warn",
            "results": results, "nodes": {nm: {} for nm in names}, "advice": []}


def render(doc) -> list[str]:
    buf = io.StringIO()
    render_preflight(doc, Console(file=buf, width=120, color_system=None))
    return buf.getvalue().splitlines()


def test_terminal_output_has_the_same_length_at_2_and_4096_nodes():
    assert len(render(synthetic_cluster(2, None))) == len(render(synthetic_cluster(4096, None)))


def test_64_nodes_one_bad_node_fits_a_screen_with_the_bad_node_first():
    lines = render(synthetic_cluster(64, bad=17))
    assert len(lines) < 40
    first_panel = next(i for i, ln in enumerate(lines) if "FAIL" in ln or "WARN" in ln[:10] or "─ WARN" in ln or "─ FAIL" in ln)
    assert "FAIL" in lines[first_panel] and "node0017" in "\n".join(lines[first_panel:first_panel + 4])
    assert any("all 64 nodes" in ln for ln in lines)
    assert any(ln.startswith("  fix: allow TCP between job nodes") for ln in lines)


def test_peer_text_cannot_steer_the_terminal():
    doc = synthetic_cluster(2, None)
    doc["results"].insert(0, result("cluster", "warn", "node0001", "evil \x1b[2J\x1b]0;title\x07 text"))
    out = "\n".join(render(doc))
    assert "\x1b" not in out and "\\x1b[2J" in out


def test_zero_padded_families_cross_a_power_of_ten():
    assert compress_hosts([f"node{i:03d}" for i in range(512)]) == "node[000-511]"


def test_links_into_one_node_name_that_node_not_all_nodes():
    # node c's firewall drops incoming TCP: a -> c and b -> c group (names and numbers masked), and the group
    # once said "all 3 nodes", hiding c; now c leads, with the others beside it, and sorts like one node
    rs = [dict(result("mesh", "fail", "x", f"link {s} -> node3 timed out"), nodes=[s, "node3"]) for s in ("node1", "node2")]
    rs.append(result("clock-sync", "warn", "node2", "clock not synchronised on node2"))
    rs += [result("clock-sync", "warn", n, f"clock not synchronised on {n}") for n in ("node1", "node3")]
    groups = group_results(rs, 3)
    mesh = groups[0]
    assert mesh["check"] == "mesh" and mesh["common"] == ["node3"] and mesh["count"] == 2
    assert mesh["where"] == "node3 (with node[1-2])"
    assert "common" not in groups[1] and groups[1]["where"] == "all 3 nodes"  # one node each: nothing in common
    text = "\n".join(render({"kind": "preflight", "scope": "cluster", "verdict": "fail", "results": rs,
                             "nodes": {n: {} for n in ("node1", "node2", "node3")}, "advice": []}))
    assert "[2 alike, each naming node3]" in text and "node(s): node3 (with node[1-2])" in text
    # a link failing both ways names two nodes, both in every member: the whole group, nothing to single out
    both = [dict(result("mesh", "fail", "x", "link a -> b timed out"), nodes=["a", "b"]),
            dict(result("mesh", "fail", "x", "link b -> a timed out"), nodes=["b", "a"])]
    assert "common" not in group_results(both, 2)[0]
