"""Round 4's crafted inputs (issue 33, part 3): digits that `isdigit()` takes and `int()` does not, numbers
no axis can hold, lone surrogates, deep folders, unreadable folders, /proc. Each one reached exit 4 before;
now each is a result (exit 0/1) or one line with exit 2, never an internal error."""
from __future__ import annotations

import copy
import os
import json

import pytest
from pathlib import Path

from tests import report_fixtures as rf
from tests.unit.helpers import run_cli

ODD_DIGITS = ("²", "①")


def report_of(tmp_path, doc, name="doc"):
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / f"{name}.html"
    p = run_cli("report", str(src), "-o", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    return out.read_text()


@pytest.mark.parametrize("odd", ODD_DIGITS)
def test_report_metric_keys_and_node_names_of_odd_digits(tmp_path, odd):
    tr = rf.trainer(4, 10)
    tr["metrics"][odd] = tr["metrics"].pop("1")
    report_of(tmp_path, tr, "trainer")
    pf = rf.preflight(4, evil=False)
    first = next(iter(pf["nodes"]))
    pf["nodes"][odd] = pf["nodes"].pop(first)
    pf["nodes"][f"node{odd}"] = pf["nodes"].pop(next(iter(pf["nodes"])))
    report_of(tmp_path, pf, "preflight")


def _set_clock(doc, value):
    for i, node in enumerate(doc["nodes"].values()):
        for export in (node.get("exports") or {}).values():
            if isinstance(export, dict) and isinstance(export.get("clock"), dict):
                export["clock"]["offset_ms"] = value if i % 2 else 1.0
                export["clock"]["bound_ms"] = value if i == 3 else 0.1


@pytest.mark.parametrize("value", [1e308, -1e308, 1.7e308])
def test_report_clock_offsets_no_axis_can_hold_are_left_out_and_said(tmp_path, value):
    doc = rf.preflight(4, evil=False)
    _set_clock(doc, value)
    page = report_of(tmp_path, doc)
    assert "not drawn" in page and "inf" not in page.split("<svg", 1)[-1].split("</svg>", 1)[0]


@pytest.mark.parametrize("pair", [(1.6e308, -1.6e308), (1e308, 3.0), (float("inf"), 1.0)])
def test_report_losses_no_axis_can_hold_are_left_out_and_said(tmp_path, pair):
    doc = rf.trainer(2, 10)
    for i, row in enumerate(doc["metrics"]["0"]):
        row["loss"] = row["tokens_per_s"] = pair[i % 2]
    assert "values not drawn" in report_of(tmp_path, doc)


def test_report_bench_bandwidth_of_1e308(tmp_path):
    doc = rf.bench(4)
    for row in doc["rows"]:
        for form in ("in_place", "out_of_place"):
            if row.get(form):
                row[form]["busbw_gbs"] = 1.6e308 if row["size"] % 2048 else -1.6e308
    report_of(tmp_path, doc)


def test_svg_axes_take_any_float():
    from ddpdoctor.report import svg

    for pair in ((1.6e308, -1.6e308), (1e308, 1e-308), (-1e308, 0.0)):
        svg.line_chart("t", {"a": [(1, pair[0]), (2, pair[1])]}, xlabel="x", ylabel="y")
        svg.line_chart("t", {"a": [(pair[0], 1.0), (pair[1], 2.0)]}, xlabel="x", ylabel="y", log_x=True, log_y=True)
        svg.bars("b", [("n0", pair[0], False), ("n1", pair[1], True)], ylabel="y", ref=pair[0])
        svg.offsets_chart("c", [("n0", "0", pair[0], pair[1], True), ("n1", "1", 1.0, 0.1, False)], ylabel="ms",
                          half=1.0, step=0.5)


# ---------------------------------------------------------------- the post-mortem's inputs
def _log_dir(tmp_path, error_json: str | None = None):
    logs = tmp_path / "logs"
    attempt = logs / "rid" / "attempt_0"
    for r in ("0", "1"):
        (attempt / r).mkdir(parents=True)
    (attempt / "1" / "error.json").write_text(error_json or json.dumps(
        {"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback\nRuntimeError: boom",
                                                                   "timestamp": "1"}}}))
    return logs, attempt


def _dump(logs, rank, seq, **over):
    entry = {"collective_seq_id": seq, "pg_id": 0, "process_group": ["0", "default"], "profiling_name": "nccl:all_reduce",
             "time_created_ns": 5, "state": "scheduled", "frames": [{"filename": "train.py", "line": 4, "name": "main"}]}
    entry.update(over)
    doc = {"version": "2.4", "entries": [entry],
           "pg_status": {"0": {"last_enqueued_collective": seq, "last_completed_collective": seq - 1}}}
    (logs / f"nccl_trace_rank_{rank}").write_text(json.dumps(doc))
    return doc


def _postmortem_ok(logs, *args):
    p = run_cli("postmortem", str(logs), *args)
    assert p.returncode in (0, 1) and "internal error" not in p.stderr, p.stderr[-2000:]
    return p


@pytest.mark.parametrize("odd", ODD_DIGITS)
def test_postmortem_flight_record_fields_and_rank_folders_of_odd_digits(tmp_path, odd):
    logs, attempt = _log_dir(tmp_path)
    for r in (0, 1):
        _dump(logs, r, 3, frames=[{"filename": "a.py", "line": odd, "name": "f"}], pg_id=odd)
    (attempt / odd).mkdir()
    (attempt.parent / f"attempt_{odd}").mkdir()
    _postmortem_ok(logs, "--json")


def test_postmortem_lone_surrogates_in_error_json_with_report_and_output(tmp_path):
    logs, attempt = _log_dir(tmp_path, '{"message": {"message": "RuntimeError: boom \\ud800", "extraInfo": '
                                       '{"py_callstack": "Traceback\\nRuntimeError: boom \\udfff", "timestamp": "1"}}}')
    os.mkdir(os.fsencode(attempt) + b"/\xff\xfe")  # a folder name that is not UTF-8: a surrogate escape
    report, out = tmp_path / "r.html", tmp_path / "out"
    p = _postmortem_ok(logs, "--report", str(report), "--output", str(out))
    assert "boom \ufffd" in report.read_text() and "boom" in p.stdout
    assert "\\ufffd" in (out / "postmortem.json").read_text() or "\ufffd" in (out / "postmortem.json").read_text()


def _nest(root, depth):
    """``depth`` folders one inside the other (a path far beyond PATH_MAX: made through directory fds)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def _rmtree_deep(root):
    """shutil.rmtree recurses too (3000 folders: RecursionError, in pytest's own clean-up as well): rm -rf."""
    import subprocess

    subprocess.run(["rm", "-rf", str(root)], check=False, timeout=60)


@pytest.mark.timeout(120)
def test_postmortem_of_3000_nested_folders(tmp_path):
    logs, attempt = _log_dir(tmp_path)
    _nest(attempt / "0", 3000)
    try:
        p = _postmortem_ok(logs, "--json")
        assert "deeper than" in "\n".join(json.loads(p.stdout)["input_notes"])
    finally:
        _rmtree_deep(logs)


def test_postmortem_of_a_dump_claiming_65536_ranks_is_short(tmp_path):
    logs, _ = _log_dir(tmp_path)
    ranks = json.dumps(list(range(65536)))
    for r, seq in ((0, 3), (1, 3), (2, 2)):
        doc = _dump(logs, r, seq)
        doc["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}}
        (logs / f"nccl_trace_rank_{r}").write_text(json.dumps(doc))
    p = run_cli("postmortem", str(logs), env={"COLUMNS": "100"})
    assert p.returncode == 1, p.stderr[-2000:]
    assert "3-65535" in p.stdout and len(p.stdout.splitlines()) < 40, len(p.stdout.splitlines())


def test_rank_ranges():
    from ddpdoctor.grouping import rank_ranges, rank_values

    assert rank_ranges([3, 0, 1, 2, 8, 65535, 65534]) == "0-3, 8, 65534, 65535"
    assert rank_ranges([1, None]) == "1, None" and rank_ranges([]) == ""
    many = {str(r): (3 if r < 2 else 2) for r in range(100)}
    assert rank_values(many) == "rank(s) 0, 1: 3, rank(s) 2-99: 2"
    assert rank_values({"1": 2, "0": 3}) == "rank 0: 3, rank 1: 2"


@pytest.mark.timeout(120)
def test_postmortem_of_a_mode_000_rank_folder_when_not_root():
    """Not root: the folder cannot be read (a note, not exit 4). As root, the command runs as nobody (setpriv),
    on a log dir in a world-readable temporary folder of its own."""
    import shutil
    import subprocess
    import sys
    import tempfile

    import ddpdoctor

    cmd = [sys.executable, "-m", "ddpdoctor", "postmortem"]
    if os.geteuid() == 0:
        from tests.as_nobody import NOBODY, why_not

        if why_not():
            pytest.skip(why_not())
        cmd = [*NOBODY, *cmd]
    base = Path(tempfile.mkdtemp(prefix="ddpdoctor-mode000-"))
    try:
        os.chmod(base, 0o755)
        logs, attempt = _log_dir(base)
        for p in base.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        os.chmod(attempt / "1", 0)
        env = {**os.environ, "PYTHONPATH": str(Path(ddpdoctor.__file__).parents[1]), "HOME": str(base),
               "DDPDOCTOR_NO_SAVE": "1"}
        p = subprocess.run([*cmd, str(logs), "--json"], capture_output=True, text=True, timeout=90, env=env, cwd=base)
        # 5: no failure recorded, and no normal end shown either (a log dir says nothing of one)
        assert p.returncode in (0, 1, 5) and "internal error" not in p.stderr, p.stderr[-2000:]
        assert "permission denied" in "\n".join(json.loads(p.stdout)["input_notes"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_run_trainer_run_dir_in_proc_is_one_line(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('x')\n")
    p = run_cli("run-trainer", "--no-preflight", "--run-dir", "/proc", "--", str(script))
    assert p.returncode == 2 and "internal error" not in p.stderr, p.stderr
    assert [line for line in p.stderr.splitlines() if line.strip()][0].startswith("Error: --run-dir /proc")
