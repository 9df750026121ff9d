"""`ddpdoctor report --history`: each node's trend over a results directory (ddpdoctor/history/), its SQLite index
read once per file, the findings worded with the runs they compare; the 10,000-run figure:
tests/benchmarks/bench_unattended.py."""
from __future__ import annotations

import json
import re

from ddpdoctor.history import collect
from ddpdoctor.history.index import DB_NAME
from ddpdoctor.report.html import build_history_html
from ddpdoctor.report.views.history import history_view
from tests.history_fixtures import node_check_doc, write_history
from tests.unit.helpers import run_cli


def test_a_slower_node_and_a_flapping_check_are_found_with_the_runs_they_compare(tmp_path):
    write_history(tmp_path, nodes=4, runs=12)
    h = collect(tmp_path)
    assert (h["files"], h["read"], h["runs"], len(h["nodes"])) == (96, 96, 96, 4)
    slower = [f for f in h["findings"] if f["kind"] == "slower"]
    flaps = [f for f in h["findings"] if f["kind"] == "flap"]
    assert [(f["node"], f["op"], f["size"], round(f["ratio"], 2)) for f in slower] == [
        ("node1", "all_reduce", 1 << 20, 0.4)]  # both sizes fell to 40 %: one finding per collective
    assert slower[0]["latest"]["run_id"] == "bench-node1-11" and len(slower[0]["past"]) == 10
    assert slower[0]["past"][0]["run_id"] == "bench-node1-1"
    assert [(f["node"], f["check"], f["changes"], f["sequence"]) for f in flaps] == [
        ("node2", "clock-sync", 11, ".x.x.x.x.x.x")]
    assert [n["node"] for n in h["nodes"]][:2] == ["node1", "node2"]  # the nodes with findings first
    words = history_view(h)["findings"]
    assert words[0]["title"] == "node1: all_reduce at 1 MiB is slower than its own past"
    assert "0.2 GB/s in run bench-node1-11" in words[0]["text"] and "40% of the median 0.5 GB/s" in words[0]["text"]
    assert "10 runs from bench-node1-1" in words[0]["text"]


def test_the_index_reads_each_file_once_and_follows_changes(tmp_path):
    write_history(tmp_path, nodes=2, runs=5)
    assert collect(tmp_path)["read"] == 20
    assert (tmp_path / DB_NAME).is_file()
    again = collect(tmp_path)
    assert (again["read"], again["runs"]) == (0, 20)
    (tmp_path / "node1" / "000000-health_check.json").unlink()
    (tmp_path / "node1" / "extra.json").write_text(json.dumps(node_check_doc("node1", 99, flapping=False)))
    (tmp_path / "node1" / "notes.json").write_text('{"mine": true}')  # a user's own JSON: counted, not a run
    changed = collect(tmp_path)
    assert (changed["read"], changed["runs"], changed["unreadable"]) == (2, 20, 1)


def test_history_command_page_and_lines(tmp_path):
    write_history(tmp_path, nodes=3, runs=8)
    evil = node_check_doc("<img src=x onerror=alert(1)>", 0, flapping=False)
    (tmp_path / "evil.json").write_text(json.dumps(evil))
    p = run_cli("report", "--history", "--results-dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("history of 49 runs on 4 nodes in ")
    assert "WARN node1: all_reduce at 1 MiB is slower than its own past" in p.stdout
    assert "WARN node2: clock-sync flaps (7 changes in its last 8 runs)" in p.stdout
    page = (tmp_path / "history.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "all_reduce bus bandwidth per node" in page and "<svg" in page
    assert run_cli("report", "--history", "--results-dir", str(tmp_path / "none")).returncode == 2
    assert run_cli("report", "--history", "x.json").returncode == 2


def test_a_page_of_a_single_run_without_bandwidth():
    h = {"root": "/r", "runs": 1, "files": 1, "read": 1, "nodes": [
        {"node": "n1", "runs": 1, "first": 0.0, "last": 0.0, "last_verdict": "pass", "verdicts": {"pass": 1},
         "contexts": ["prolog"], "flaps": [], "bandwidth": {}, "slower": []}],
        "findings": [], "rules": {"flap_window": 20, "flap_changes": 3, "slower_ratio": 0.8, "past_runs": 10,
                                  "min_past": 3}}
    page = build_history_html(h)
    assert "No node is slower than its own past and no check flaps." in page and "<svg" not in page


def _runs(values_by_size: dict[int, list[float]]):
    """nccl-bench runs of one node, run i measuring each size's i-th value."""
    from ddpdoctor.history.index import Run

    n = len(next(iter(values_by_size.values())))
    return [Run(f"r{i}.json", "n1", "nccl-bench", f"bench-{i}", float(i), "nccl-bench", "pass",
                bandwidth={("all_reduce", size): vals[i] for size, vals in values_by_size.items()}) for i in range(n)]


def test_slower_than_its_past_needs_a_drop_beyond_the_nodes_own_spread_seen_twice():
    from ddpdoctor.history.trends import Rules, slower

    rules = Rules()
    # issue 46: four healthy gloo runs on a quiet node, the fourth at 79 % of the median of the three before
    healthy = {1 << 20: [0.61, 0.55, 0.66, 0.60], 1 << 23: [1.16, 1.00, 1.22, 0.916]}
    assert slower(_runs(healthy), rules) == []
    # a real drop at one size of one run only: noise until seen again
    once = {1 << 20: [0.6, 0.6, 0.61, 0.59, 0.6], 1 << 23: [1.2, 1.21, 1.19, 1.2, 0.5]}
    assert slower(_runs(once), rules) == []
    # ... seen again in the next run, or at two sizes of one run: a finding, its worst size named
    twice = {1 << 23: [1.2, 1.21, 1.19, 1.2, 0.5, 0.48]}
    (f,) = slower(_runs(twice), rules)
    assert (f["size"], f["consecutive"], f["sizes"], round(f["ratio"], 2)) == (1 << 23, True, 1, 0.4)
    across = {1 << 20: [0.6, 0.6, 0.61, 0.59, 0.3], 1 << 23: [1.2, 1.21, 1.19, 1.2, 0.5]}
    (f,) = slower(_runs(across), rules)
    assert (f["sizes"], f["size"]) == (2, 1 << 23)
    # the bench's real runs (issue 45): a node pinned to a busy core stays slow; its first slow run must not widen
    # the spread the second is judged by (before: no finding in any run after the first)
    stays_slow = {1 << 23: [1.0427, 0.8646, 0.8999, 1.3659, 0.2885, 0.3954]}
    (f,) = slower(_runs(stays_slow), rules)
    assert (f["consecutive"], round(f["ratio"], 2)) == (True, 0.41)
    recovered = {1 << 23: [1.0427, 0.8646, 0.8999, 1.3659, 0.2885, 0.95]}  # one slow run, then its usual speed
    assert slower(_runs(recovered), rules) == []
    # a node whose runs spread widely: a drop within its spread is not a finding
    noisy = {1 << 20: [1.0, 0.5, 1.5, 0.6, 1.4, 0.55], 1 << 23: [2.0, 1.0, 3.0, 1.2, 2.8, 1.1]}
    assert slower(_runs(noisy), rules) == []


def test_the_timeline_shows_each_nodes_check_states_with_its_drains_and_resumes(tmp_path):
    write_history(tmp_path, nodes=3, runs=8)
    h = collect(tmp_path)
    node3 = next(n for n in h["nodes"] if n["node"] == "node3")
    assert (node3["drains"], node3["resumes"]) == (1, 1)
    actions = [r["action"] for r in node3["timeline"]["runs"]]
    assert actions == ["", "", "", "", "drain", "", "resume", ""]
    assert node3["timeline"]["runs"][4]["levels"]["resources"] == "fail"
    view = history_view(h)
    assert [t["node"] for t in view["timelines"]][:3] == ["node1", "node2", "node3"]
    page = build_history_html(h)
    assert page.count('class="timeline"') == 3 and "Check states over time" in page
    assert "▼ drained" in page and "▲ resumed" in page and "drained 1×, resumed 1× by the node check" in page
    assert "run 5 (hc-node3-4, health_check): resources fail" in page


def test_run_axes_count_in_whole_runs():
    from ddpdoctor.report import svg

    assert svg.int_ticks(1, 2) == [1.0, 2.0] and svg.int_ticks(1, 3) == [1.0, 2.0, 3.0]
    assert all(t == int(t) for t in svg.int_ticks(1, 97)) and len(svg.int_ticks(1, 97)) <= 12
    chart = svg.line_chart("t", {"n1": [(1, 1.0), (2, 2.0), (3, 1.5)]}, xlabel="run", ylabel="y", integer_x=True)
    ticks = re.findall(r'class="tick" text-anchor="middle">([^<]+)<', chart)
    assert ticks == ["1", "2", "3"], ticks


LIB = "/opt/conda/envs/train/lib/python3.11/site-packages/torch/lib/libtorch_cuda_linalg.so"


def _drain_loop(root, node: str = "node3") -> list[str]:
    """Issue 56.7's node: the meeting drains it for clock-skew, a health check resumes it, the loop five times in
    20 minutes; one drain by its own checks, for torch-build with a long reason naming the broken library at its
    end. The reasons written, in order."""
    from tests.history_fixtures import START
    import datetime as dt

    (root / node).mkdir(parents=True)
    reasons = []
    seq = ["drain", "resume", "drain", "resume", "drain", "resume", "drain", "", "drain"]
    for i, action in enumerate(seq):
        doc = node_check_doc(node, i, flapping=False)
        doc["created"] = (START + dt.timedelta(minutes=2.5 * i)).isoformat(timespec="seconds")
        nc = doc["node_check"]
        if action:
            nc.update(action=action, scontrol={"command": ["scontrol"], "ok": True, "error": None})
        if action == "drain" and i == 8:
            why = "torch does not import: " + "ImportError: " * 6 + f"cannot open shared object file {LIB}"
            nc.update(reason=f"ddpdoctor: torch-build: {why}"[:250])
            doc["results"].append({"check": "torch-build", "level": "fail", "summary": why, "nodes": [node]})
        elif action == "drain":
            nc.update(context="prolog", reason="ddpdoctor: clock-skew [meeting]: node3 is 5.1 s ahead of node1; "
                      "once fixed: scontrol update NodeName=node3 State=RESUME")
            nc["cross_node"] = {"verdict": "fail", "checks": ["clock-skew", "mesh"], "results": [
                {"check": "clock-skew", "level": "fail", "summary": "node3 is 5.1 s ahead", "nodes": [node]}]}
        if nc.get("reason"):
            reasons.append(nc["reason"])
        (root / node / f"{i:06d}-{nc['context']}.json").write_text(json.dumps(doc))
    return reasons


def test_the_page_names_each_drains_reason_and_time_and_the_meetings_checks_and_calls_a_drain_loop_flapping(
        tmp_path):
    """Issue 56.7: each drain's reason (whole: the library at its end) and time, the meeting's checks as rows of
    their own, time on the axis, a drain/resume loop a finding."""
    from ddpdoctor.report import svg
    from ddpdoctor.report.views.history import console_lines

    reasons = _drain_loop(tmp_path)
    h = collect(tmp_path)
    (node,) = h["nodes"]
    assert [a["reason"] for a in node["actions"] if a["action"] == "drain"] == reasons
    assert reasons[-1].endswith("libtorch_cuda_linalg.so") and len(reasons[-1]) > 200
    assert "clock-skew [meeting]" in node["timeline"]["checks"] and "mesh [meeting]" in node["timeline"]["checks"]
    levels = [r["levels"].get("clock-skew [meeting]") for r in node["timeline"]["runs"]]
    assert levels[:3] == ["fail", None, "fail"] and node["timeline"]["runs"][0]["levels"]["mesh [meeting]"] == "pass"
    (loop,) = [f for f in h["findings"] if f["kind"] == "drain-flap"]
    assert (loop["drains"], loop["resumes"]) == (5, 3)
    view = history_view(h)
    assert view["findings"][0]["title"] == "node3: drained and resumed in a loop (drained 5×, resumed 3× in 20 min)"
    lines = console_lines(view)
    assert any("drained and resumed in a loop" in ln for ln in lines) and not any("no check" in ln for ln in lines)
    page = build_history_html(h)
    for r in reasons:  # each reason whole, beside its time
        assert f"<td>{svg.escape(r)}</td>" in page, r
    assert "<td>2026-11-01 00:20:00Z</td><td>▼ drained</td><td>ddpdoctor: torch-build: torch does not import" in page
    assert "Check states over time" in page and "UTC time, 2026-11-01 00:00:00Z → 2026-11-01 00:20:00Z" in page
    ticks = re.findall(r'class="tick" text-anchor="middle">([^<]+)<', page)
    assert ticks[:3] == ["00:00", "00:05", "00:10"], ticks


def test_the_timelines_time_axis_reads_at_every_span():
    """Over days the ticks were dates that repeat (12 h apart, 'm-d' twice); over a year 57 overlapping ticks: now
    at most six, each label as precise as its spacing, none twice."""
    import re

    from ddpdoctor.report import svg

    t0 = 1_764_000_000.0
    for days in (0.003, 1, 3, 10, 40, 400, 2000):
        runs = [{"run_id": str(i), "created": t0 + i * days * 86400 / 4, "verdict": "pass", "levels": {}}
                for i in range(5)]
        page = svg.timeline("node1", [], runs)
        labels = re.findall(r'class="tick" text-anchor="middle">([^<]+)</text>', page)
        assert 1 <= len(labels) <= 7 and len(set(labels)) == len(labels), (days, labels)
    assert re.search(r">\d{4}-\d\d-\d\d</text>", page), "a span of years shows the year"
