"""The HTML report: merging, the matrix grouping at 512 nodes, escaping of hostile node data, size, errors."""
from __future__ import annotations

import json
import re
from html import unescape

import pytest

from ddpdoctor import documents
from ddpdoctor.report import html, svg
from ddpdoctor.report import viewmodel as view
from tests import report_fixtures as fx
from tests.unit.helpers import run_cli


def test_view_merges_every_kind_failures_first():
    v = view.build([fx.preflight(8), fx.bench(16), fx.trainer()])
    assert v["verdict"] == "fail"
    assert v["findings"][0]["check"] in ("run-trainer", "nccl-bench")
    assert [f["level"] for f in v["findings"]] == sorted((f["level"] for f in v["findings"]),
                                                          key=lambda lv: -view.SEVERITY[lv])
    assert len(v["bench"]) == 1 and len(v["trainer"]) == 1 and v["node_count"] == 8


def _cluster_pair(n: int = 4):
    """A cluster run as its files are: the master's cluster.json and another node's node-*.json, which repeats
    the master's results and adds one finding only that node saw."""
    import copy

    master = dict(fx.preflight(n, evil=False, run_id="job-7"), role="master",
                  master={"node": "node000", "host": "node000", "output_dir": "/out"})
    worker = copy.deepcopy(master)
    worker.update(role="worker", this_node="node001",
                  master={"node": "node000", "host": "node000", "output_dir": "/out", "results": len(master["results"])})
    worker["results"].append({"check": "cluster", "level": "warn", "summary": "ignored an invalid message at roster: x",
                              "nodes": ["node001"]})
    return master, worker


def test_a_clusters_files_given_together_count_each_result_once():
    """`ddpdoctor report out/*.json` (README) on a shared --output: cluster.json and every node's node-*.json.
    Each result counted once per file before (2 nodes: "10 pass" for 5); the node's own finding is kept."""
    master, worker = _cluster_pair()
    alone = view.build([master])
    both = view.build([worker, master])
    assert both["counts"] == dict(alone["counts"], warn=alone["counts"].get("warn", 0) + 1), (both["counts"], alone["counts"])
    assert [d["kind"] for d in both["documents"]] == ["preflight"]
    assert any("invalid message at roster" in m["summary"] for f in both["findings"] for m in f["members"])
    # two nodes' copies without the master's: one set of results, each node's own findings
    other = dict(worker, this_node="node002")
    assert view.build([worker, other])["counts"]["pass"] == alone["counts"]["pass"]
    # another run (a rerun in the same job: another master) is not a copy: both are shown
    rerun = dict(master, master={"node": "node003"})
    assert view.build([master, rerun])["counts"]["pass"] == 2 * alone["counts"]["pass"]


def test_matrix_groups_identical_nodes_and_keeps_the_odd_ones():
    v = view.build([fx.preflight(512)])
    rows = v["matrix"]["rows"]
    assert sum(r["count"] for r in rows) == 512
    assert len(rows) <= 6, [r["label"] for r in rows]
    assert rows[0]["worst"] == "fail" and rows[0]["count"] <= 2  # the odd node stands alone, first
    assert max(r["count"] for r in rows) >= 500


def test_facts_diff_names_the_odd_node_with_both_values():
    diff = {d["fact"]: d for d in view.facts_diff(view.merge_nodes([fx.preflight(5, evil=False)]))}
    d = diff["torch-build.torch_version"]
    assert d["majority"] == "2.13.0" and d["odd"] == [{"node": "node002", "value": "2.4.0"}]


def test_reachability_full_matrix_small_failed_links_only_large():
    small = view.reachability(view.merge_nodes([fx.preflight(6, evil=False)]))
    assert len(small["grid"]) == 6 and small["failed"] == [{"src": "node000", "dst": "node002", "class": "timed out"}]
    large = view.reachability(view.merge_nodes([fx.preflight(200, evil=False)]))
    assert large["grid"] == [] and large["failed"]


def test_hostile_node_data_is_shown_literally():
    page = html.build_html([fx.preflight(4), fx.trainer()])
    assert fx.EVIL not in page and "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>alert" not in page and "&lt;/script&gt;&lt;script&gt;alert(2)" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert page.count("<script>") == 1  # ours, inline


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"


def test_control_characters_from_a_document_are_shown_never_raw():
    """A host name, a result's text and an env value carrying terminal escape sequences (OSC title, clear screen,
    a one-byte CSI, a right-to-left override): the report shows them as \\x1b..., in the tables and in the SVG
    labels alike, so `cat report.html` or a copy from the page is not steered by them."""
    doc = fx.preflight(4, evil=False, name_format="n{:02d}" + ESCAPES)
    doc["results"][0]["summary"] += ESCAPES
    doc["results"][0]["fix"] = "run " + ESCAPES
    bench = fx.bench(4)
    bench["rows"][0]["op"] = "all_reduce" + ESCAPES
    page = html.build_html([doc, bench, fx.trainer()])
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", page), \
        re.search(".{40}[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e].{10}", page)
    assert "n00\\x1b]0;pwned\\x07" in page and "all_reduce\\x1b]0;pwned" in page


def test_only_the_reports_own_script_may_run():
    """script-src is the hash of report.js, not 'unsafe-inline': markup that slipped past the escaping (an
    injected <script> or an onerror= handler) would not run (tests/browser checks it in chromium)."""
    import base64
    import hashlib

    page = unescape(html.build_html([fx.preflight(2)]))
    js = (html.TEMPLATES / "report.js").read_text()
    digest = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
    csp = re.search(r'Content-Security-Policy" content="([^"]*)"', page).group(1)
    assert f"script-src 'sha256-{digest}'" in csp and "unsafe-inline'; img" not in csp, csp
    assert f"<script>{js}</script>" in page


def test_self_contained_and_secrets_stay_redacted():
    page = html.build_html([fx.preflight(4), fx.bench(16), fx.trainer()])
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", page)
    assert "http://" not in page and "https://" not in page  # inline SVG in HTML needs no namespace URL
    assert "default-src 'none'" in unescape(page)  # the CSP forbids any fetch even if something slipped in
    assert "<redacted>" not in page and "&lt;redacted&gt;" in page


def test_512_nodes_with_a_full_sweep_stays_under_5_mb():
    page = html.build_html([fx.preflight(512), fx.bench(4096), fx.trainer(8, 2000)])
    assert len(page.encode()) < 5 * 1024 * 1024, len(page)
    assert page.count("<svg") >= 6 + 1 + 2  # six ops, the clock, loss and throughput


def test_svg_labels_are_escaped():
    out = svg.line_chart("t<x>", {"<b>": [(1, 2), (2, 3)]}, xlabel="a&b", ylabel="y", log_x=True, log_y=True)
    assert "<b>" not in out and "&lt;b&gt;" in out and "a&amp;b" in out
    assert svg.line_chart("empty", {}, xlabel="x", ylabel="y") == ""


def test_log_axes_keep_every_grid_line_inside_the_plot():
    # A sweep from 1 KiB to 64 KiB with busbw 0.0015..0.05 once drew decade lines above and left of the plot.
    out = svg.line_chart("b", {"s": [(1024, 0.0015), (65536, 0.05)]}, xlabel="x", ylabel="y", log_x=True, log_y=True)
    grid = re.findall(r'<line x1="([-\d.]+)" y1="([-\d.]+)" x2="([-\d.]+)" y2="([-\d.]+)" class="grid"', out)
    assert grid
    for x1, y1, x2, y2 in (map(float, g) for g in grid):
        assert svg.PAD_L - 1 <= min(x1, x2) and max(x1, x2) <= svg.W - svg.PAD_R + 1
        assert svg.PAD_T - 1 <= min(y1, y2) and max(y1, y2) <= svg.H - svg.PAD_B + 1


def test_report_command_merges_and_errors(tmp_path):
    a = documents.dump(fx.preflight(4), tmp_path / "a.json")
    b = documents.dump(fx.bench(8), tmp_path / "b.json")
    out = tmp_path / "r.html"
    p = run_cli("report", a, b, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "different runs" in p.stderr and out.stat().st_size > 1000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(fx.preflight(2))[:500])
    old = tmp_path / "old.json"
    old.write_text(json.dumps(dict(fx.preflight(2), schema_version=0)))
    for f, needle in ((bad, "not valid JSON"), (old, "schema_version"), (tmp_path / "nope.json", "cannot read")):
        p = run_cli("report", a, f, "-o", out)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and str(f) in lines[0] and needle in lines[0], p.stderr


def test_preflight_report_flag_end_to_end(tmp_path):
    out = tmp_path / "pre.html"
    p = run_cli("preflight", "--only", "env-vars,resources", "--report", out)
    assert p.returncode in (0, 1), p.stderr
    page = out.read_text()
    assert 'id="verdict"' in page and "env-vars" in page and "resources" in page


# ---------------------------------------------------------------------- issue 15: a report read at a glance
def test_findings_are_grouped_across_nodes_failures_first_passes_one_row_each():
    v = view.build([fx.preflight(64, evil=False)])
    gpu = [g for g in v["findings"] if g["check"] == "gpu"]
    assert len(gpu) == 1 and gpu[0]["where"] == "node[010-013]" and gpu[0]["count"] == 4
    assert [m["where"] for m in gpu[0]["members"]] == ["node010", "node011", "node012", "node013"]
    levels = [g["level"] for g in v["findings"]]
    assert levels == sorted(levels, key=lambda lv: -view.SEVERITY[lv]) and levels[0] == "fail"
    assert len(v["findings"]) == 5  # clock-skew, parity, mesh (fail); names, gpu (warn): not one per node
    assert sorted(g["check"] for g in v["passing"]) == sorted({g["check"] for g in v["passing"]})
    assert {g["where"] for g in v["passing"]} >= {"all 64 nodes"}
    page = html.build_html([fx.preflight(64, evil=False)])
    assert page.count('class="finding ') == 5 and "node[010-013]" in page and "each node (4)" in page
    assert page.count("<tr><td><span class=\"lv lv-pass\">") == len(v["passing"])


def test_a_healthy_cluster_reads_the_same_at_2_and_at_512_nodes():
    def healthy(n):
        doc = fx.preflight(n, evil=False)
        doc["results"] = [r for r in doc["results"] if r["level"] == "pass"]
        return view.build([doc])
    small, big = healthy(3), healthy(512)
    assert big["findings"] == [] and len(big["passing"]) == len(small["passing"])
    assert all(len(g["members"]) <= view.MEMBERS_SHOWN for g in big["passing"])


def test_versions_table_marks_the_odd_values():
    t = view.versions_table(view.merge_nodes([fx.preflight(8, evil=False)]))
    assert t["columns"] == ["Python", "torch", "CUDA", "NCCL", "driver", "GPUs", "interface to master"]
    rows = {r["where"]: r for r in t["rows"]}
    assert [c["value"] for c in rows["node002"]["cells"] if c["odd"]] == ["2.4.0"]
    assert [c["value"] for c in rows["node003"]["cells"] if c["odd"]] == ["eth0 (mtu 1500)"]
    majority = t["rows"][-1]
    assert majority["count"] == 6 and not any(c["odd"] for c in majority["cells"])
    assert rows["node002"]["cells"][5]["value"] == "8 × NVIDIA H100 80GB HBM3"
    page = html.build_html([fx.preflight(8, evil=False)])
    assert '<td class="odd">2.4.0</td>' in page and '<td class="odd">eth0 (mtu 1500)</td>' in page


def test_node_versions_reads_what_is_there_and_nothing_else():
    assert view.node_versions({}) == {k: "" for k, _ in view.VERSION_COLUMNS}
    v = view.node_versions({"torch-build": {"torch_build": "cpu", "python_version": "3.12.1"},
                            "gpu": {"no_driver": True, "gpus": []}, "names": {"route_to_master": "junk"}})
    assert v["cuda"] == "none (cpu build)" and v["gpus"] == "none" and v["iface"] == "" and v["python"] == "3.12.1"


def test_clock_axis_fits_sub_millisecond_offsets_and_clips_a_far_node():
    pts = [{"node": f"n{i}", "offset_ms": 0.1 * (i - 3), "bound_ms": 0.05, "bad": False} for i in range(7)]
    axis = view.clock_axis(pts, 100.0)
    assert 0.3 <= axis["half"] <= 0.6 and not axis["limit_shown"] and not axis["clipped"]
    far = pts + [{"node": "n9", "offset_ms": 1500.0, "bound_ms": 0.1, "bad": True}]
    axis = view.clock_axis(far, 100.0)
    assert axis["clipped"] and axis["half"] <= 0.6 and "n9 +1500" in axis["worst"]
    svg_text = svg.offsets_chart("c", [(p["node"], p["node"], p["offset_ms"], p["bound_ms"], p["bad"]) for p in far],
                                 ylabel="ms", half=axis["half"], step=axis["step"], limit=100.0)
    ys = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', svg_text)]
    assert max(ys) - min(ys) > 100  # 0.6 ms of spread fills the plot instead of one flat line
    assert "n9 +1500 ms" in svg_text  # the far node is drawn at the edge with its figure
    wide = view.clock_axis([{"node": "a", "offset_ms": 250.0, "bound_ms": 1.0, "bad": True},
                            {"node": "b", "offset_ms": -240.0, "bound_ms": 1.0, "bad": True}], 100.0)
    assert wide["half"] >= 251 and wide["limit_shown"] and not wide["clipped"]


def test_chart_labels_are_short_and_distinct():
    names = [f"gpu-node-a{i:03d}.cluster.example.org" for i in range(40)]
    labels, note = view.short_labels(names)
    assert len(set(labels.values())) == 40 and labels[names[7]] == "007" and "gpu-node-a" in note
    mixed, note = view.short_labels(["alpha-login-node.example", "alpha-login-node.example2x", "beta"])
    assert len(set(mixed.values())) == 3 and all(len(x) <= 10 for x in mixed.values())
    doc = fx.preflight(30, evil=False, name_format="gpu-node-a{:03d}.cluster.example.org")
    page = html.build_html([doc])
    clock = page[page.index('aria-label="clock offset'):]
    clock = clock[:clock.index("</svg>")]
    ticks = re.findall(r'class="tick[^"]*"[^>]*>([^<]+)</text>', clock)
    node_ticks = [t for t in ticks if re.fullmatch(r"\d{3}", t)]
    assert len(node_ticks) == len(set(node_ticks)) >= 15


def test_reachability_cells_carry_round_trips_and_not_probed_differs_from_self():
    nodes = view.merge_nodes([fx.preflight(6, evil=False)])
    del nodes["node005"]["facts"]["mesh"]["probes"][0]  # node005 -> node000 not probed
    nodes["node005"].pop("exports", None)  # the fixture's exports were derived from the facts before the edit
    mesh = view.reachability(nodes, {n: n[-3:] for n in nodes})
    cell = mesh["grid"][1][0]
    assert cell["state"] == "ok" and re.fullmatch(r"\.\d\d", cell["text"]) and "ms" in cell["title"]
    assert mesh["grid"][0][0]["state"] == "self" and mesh["grid"][5][0]["state"] == "none"
    assert mesh["grid"][0][2]["state"] == "bad" and mesh["grid"][0][2]["text"] == "timed out"
    assert mesh["labels"] == ["000", "001", "002", "003", "004", "005"]
    assert [view.rtt_text(x) for x in (0.004, 0.213, 1.26, 12.4, 340.0, 2100.0)] == \
        ["<.01", ".21", "1.3", "12", "340", "2.1k"]
    slow = view.reachability(view.merge_nodes([fx.preflight(8, evil=False)]))
    assert slow["grid"][4][5]["state"] == "slow" and slow["grid"][4][5]["text"] == "12"
    page = html.build_html([fx.preflight(6, evil=False)])
    for key in ("g-ok", "g-slow", "g-bad", "g-none", "g-self"):
        assert f'class="key {key}"' in page  # the legend names each kind of cell
    assert 'class="g-self"' in page and 'class="g-ok" title="node001 → node000: ' in page


def test_bench_settings_and_hosts_are_shown():
    b = view.bench_view(fx.bench(32))
    settings = dict(b["settings"])
    assert settings["ops"].startswith("all_reduce, all_gather") and settings["iters"] == "20"
    assert settings["sizes"] == "1 KiB … 1 GiB (21 sizes)" and settings["world size"] == "32"
    assert settings["dtype"] == "float32" and settings["backend"] == "nccl"
    assert b["hosts"]["rows"][1] == {"host": "node001", "ranks": "8-15", "count": 8}
    assert b["hosts"]["line"] == "4 host(s), 8 rank(s) each: node[000-003]; the i-th host runs ranks 8i … 8i+7"
    page = html.build_html([fx.bench(32)])
    assert "1 KiB … 1 GiB (21 sizes)" in page and "<td>node003</td><td>24-31</td>" in page


def test_a_sweep_a_failed_rank_cut_short_says_so_with_its_rows():
    from ddpdoctor.bench.worker import interrupted_document

    full = fx.bench(4)
    doc = interrupted_document({"run": full["run"], "hosts": full["hosts"], "planned": 21}, full["rows"][:2], None, 1,
                               error="rank 2 on node000 was killed by SIGKILL")
    b = view.bench_view(doc)
    assert b["interrupted"] == "failed after 2 of 21 rows: the figures are of the rows measured before it"
    page = unescape(html.build_html([doc]))
    assert "failed after 2 of 21 rows" in page and "rank 2 on node000 was killed by SIGKILL" in page


def test_trainer_per_rank_table_marks_the_slow_rank_and_invents_nothing():
    t = view.trainer_view(fx.trainer())
    ranks = {r["rank"]: r for r in t["ranks"]["ranks"]}
    assert ranks["2"]["step_ms_odd"] and ranks["2"]["mem_gib_odd"] and ranks["2"]["tokens_per_s_odd"]
    assert not ranks["0"]["step_ms_odd"] and round(ranks["0"]["step_ms"], 1) == 10.2 and ranks["0"]["mem_gib"] == 4
    bare = fx.trainer()
    bare["metrics"] = {"0": [{"step": 1, "loss": 2.0}], "1": [{"step": 1, "loss": 2.1}]}
    bare["metrics_summary"] = {}
    t = view.trainer_view(bare)
    assert t["ranks"]["columns"] == ["steps"] and t["line"][0] == "no training metrics recorded"
    page = html.build_html([bare])
    assert "None" not in page[page.index("run-trainer"):] and "step time" not in page


def test_the_report_titles_a_rank_that_only_detected_a_mismatch_as_the_first_failure():
    """As the terminal: the rank gloo aborted, no culprit named (no dumps), is not called the root cause."""
    doc = fx.trainer()
    doc["culprit_ranks"] = []
    doc["root_cause"] = {"rank": 1, "local_rank": 1, "host": "n0", "exit_code": -6, "signal": "SIGABRT",
                         "category": "desync", "error_type": "EnforceNotMet", "message": "size mismatch",
                         "victim": False, "reason": "detected the mismatch: <b>not</b> the culprit"}
    page = html.build_html([doc])
    assert "<b>First failure, no culprit named</b>: rank 1" in page and "<b>Root cause</b>" not in page
    assert "note: detected the mismatch: &lt;b&gt;not&lt;/b&gt; the culprit" in page
    doc["culprit_ranks"] = [1]
    assert "<b>Root cause</b>: rank 1" in html.build_html([doc])


@pytest.mark.parametrize("ids, warned", [(("job-7", "job-7", "job-7"), False), (("job-7", "job-7", "job-8"), True)])
def test_one_run_id_merges_silently_and_different_ids_warn(ids, warned):
    docs = [fx.preflight(4, run_id=ids[0]), fx.bench(16, run_id=ids[1]), fx.trainer(run_id=ids[2])]
    v = view.build(docs)
    assert bool(v["warnings"]) is warned
    if warned:
        assert v["warnings"] == ["2 runs merged (job-7, job-8): results may come from different moments"]
    assert ("runs merged" in html.build_html(docs)) is warned


def test_report_command_merges_one_run_without_a_warning(tmp_path):
    files = [documents.dump(d, tmp_path / f"{i}.json") for i, d in
             enumerate([fx.preflight(4, run_id="slurm-42"), fx.bench(8, run_id="slurm-42"), fx.trainer(run_id="slurm-42")])]
    p = run_cli("report", *files, "-o", tmp_path / "r.html")
    assert p.returncode == 0, p.stderr
    assert "different runs" not in p.stderr and "runs merged" not in (tmp_path / "r.html").read_text()


def test_hostile_text_in_every_new_field_is_escaped():
    evil = "<img src=x onerror=alert(9)>"
    pre = fx.preflight(6, evil=True)
    node = pre["nodes"][fx.EVIL]["facts"]
    node["torch-build"].update(torch_version=evil, python_version=evil, nccl_version=evil, cuda_runtime=evil)
    node["gpu"].update(driver_version=evil, gpus=[{"name": evil}])
    node["names"]["route_to_master"].update(iface=evil, mtu=evil)
    node["mesh"]["probes"][0]["error_class"] = evil
    node["mesh"]["probes"][0]["ok"] = False
    pre["results"].append({"check": "gpu", "level": "warn", "summary": evil, "nodes": [fx.EVIL], "fix": evil,
                           "actual": evil, "expected": evil, "details": {}})
    bench = fx.bench(16)
    bench["run"].update(ops=[evil], dtype=evil, backend=evil)
    bench["hosts"] = {"0": evil, "1": evil}
    tr = fx.trainer()
    tr["metrics"][evil] = [{"step": 1, "loss": 1.0, "step_time_s": 0.1}]
    tr["run_id"] = evil
    page = html.build_html([pre, bench, tr])
    assert "<img" not in page and "alert(9)" in page
    assert page.count("&lt;img src=x onerror=alert(9)&gt;") >= 10
    assert page.count("<script>") == 1


def test_facts_diff_of_two_nodes_has_no_majority_and_a_baseline_gives_one():
    # issue 20: node002 runs torch 2.4.0, node001 2.13.0: two nodes, no majority
    nodes = view.merge_nodes([fx.preflight(3, evil=False)])
    two = {n: d for n, d in nodes.items() if n in ("node001", "node002")}
    d = {x["fact"]: x for x in view.facts_diff(two)}["torch-build.torch_version"]
    assert d["no_majority"] and d["basis"] == "" and d["majority"] is None and d["majority_count"] == 0
    assert {o["node"]: o["value"] for o in d["odd"]} == {"node001": "2.13.0", "node002": "2.4.0"}
    ref = {"file": "good.json", "comparable": {"torch-build": {"torch_version": ["2.13.0"]}}}
    d = {x["fact"]: x for x in view.facts_diff(two, baseline=ref)}["torch-build.torch_version"]
    assert d["basis"] == "baseline" and d["majority"] == "2.13.0" and d["odd"] == [{"node": "node002", "value": "2.4.0"}]
    table = view.versions_table(two)
    torch_col = table["columns"].index("torch")
    assert all(row["cells"][torch_col]["odd"] for row in table["rows"])  # no side shown as the norm
    doc = fx.preflight(3, evil=False)
    doc["run"] = {"baseline": ref}
    assert view.run_baseline([doc]) == ref and view.run_baseline([fx.bench(4)]) is None
    doc["nodes"] = {n: d for n, d in doc["nodes"].items() if n in ("node001", "node002")}
    doc["run"] = {}
    page = html.build_html([doc])
    assert "Facts that differ between nodes" in page and "no majority" in page


def test_clock_view_reads_any_checks_clock_export_and_its_limit():
    """The clock chart goes through the contract: a plugin named anything that exports "clock" (with its
    warning limit) is drawn, its warn/fail results mark the node; no check is known by name."""
    nodes = {f"n{i}": {"host": f"n{i}", "facts": {}, "exports": {"my-clock": {"clock": {
        "offset_ms": 0.0 if i == 0 else 7.5 * i, "bound_ms": 0.1, "limit_ms": 5.0}}}} for i in range(3)}
    results = [{"check": "my-clock", "level": "warn", "summary": "n2 is 15 ms ahead", "nodes": ["n2"]},
               {"check": "other", "level": "fail", "summary": "unrelated", "nodes": ["n1"]}]
    doc = {"kind": "preflight", "verdict": "warn", "nodes": nodes, "results": results}
    v = view.build([doc])
    assert v["clock_limit_ms"] == 5.0
    assert [(p["node"], p["offset_ms"], p["bad"]) for p in v["clock"]] == [("n0", 0.0, False), ("n1", 7.5, False),
                                                                          ("n2", 15.0, True)]
    del nodes["n1"]["exports"]["my-clock"]["clock"]["limit_ms"], nodes["n0"]["exports"]["my-clock"]["clock"]["limit_ms"]
    del nodes["n2"]["exports"]["my-clock"]["clock"]["limit_ms"]
    assert view.build([doc])["clock_limit_ms"] == 100.0  # a document from before the export carried its limit
