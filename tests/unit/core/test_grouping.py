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
