"""Values as a person reads them, in every renderer: documents full of None/True/False (unknown local rank and
exit code of a hung rank, checksums equal, booleans among measured and expected values, unset options) are
rendered by the terminal view of every command, the HTML report and README's examples; Python's spelling of
those values appears nowhere."""
from __future__ import annotations

import copy
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from ddpdoctor import documents
from ddpdoctor.api import Level, Result
from tests import report_fixtures as fx

ROOT = Path(__file__).resolve().parents[3]
PYTHON_WORDS = re.compile(r"\b(None|True|False)\b")


def _preflight_with_python_values() -> dict:
    doc = fx.preflight(4, evil=False, run_id="job-7")
    extra = [Result("resources", Level.WARN, "memlock limit unknown on node001", ["node001"], actual=None,
                    expected=True, fix="ulimit -l unlimited"),
             Result("gpu", Level.FAIL, "persistence mode off on node002", ["node002"], actual=False, expected=True,
                    fix="nvidia-smi -pm 1"),
             Result("env-vars", Level.PASS, "NCCL_DEBUG set", ["node003"], actual=[True, None], expected=None)]
    doc["results"] += [r.to_json() for r in extra]
    doc["groups"] = []  # recomputed by the renderers from results
    for entry in doc["nodes"].values():
        entry["facts"]["torch-build"]["cuda_runtime"] = None
        entry["facts"]["gpu"]["persistence"] = False
        entry["facts"]["resources"] = {"memlock": None, "shm_ok": True}
    return doc


def _single_node_doc() -> dict:
    results = [Result("clock-sync", Level.WARN, "clock not synchronised", ["vm"], actual=False, expected=True,
                      fix="timedatectl set-ntp true"),
               Result("resources", Level.PASS, "ok", ["vm"], actual=None)]
    return documents.preflight_doc(scope="node", nodes={"vm": {"rank": 0, "host": "vm", "addr": None,
                                                               "facts": {"resources": {"x": None, "y": True}}}},
                                   checks=[], results=results, run={"nnodes": None, "gpus_per_node": None},
                                   run_id="job-7")


def _trainer_pass() -> dict:
    doc = fx.trainer(2, 20, run_id="job-7")
    doc.update(verdict="pass", exit_code=0, root_cause=None, consequences=[], checksums_equal=True,
               start={"fresh": True, "resumed_from": None, "step": None}, run_json="/r/job-7/run.json",
               logs="/r/job-7/logs/vm")
    doc["metrics_summary"]["step_time_s_mean"] = None
    return doc


def _trainer_hang() -> dict:
    doc = fx.trainer(2, 20, run_id="job-7")
    doc["root_cause"].update(rank=1, local_rank=None, exit_code=None, signal=None, category="hang",
                             host="vm", error_type="missing_rank")
    doc.update(checksums_equal=None, start={"fresh": True, "resumed_from": None}, run_json="/r/job-7/run.json",
               logs="/r/job-7/logs/vm", interrupted=None)
    doc["consequences"] = [{"rank": 0, "host": "vm", "reason": "waited", "category": "hang", "signal": None,
                            "local_rank": None, "exit_code": None}]
    doc["hang"] = {"stalled_s": 5.0, "threshold": {"seconds": 5.0, "source": "--hang-timeout", "why": None},
                   "stacks": {"1": "..."}, "verdict": {"collective": {"op": "all_reduce", "seq": 11, "pg": 0,
                                                                        "call_site": {}, "waiting_ranks": [0]},
                                                         "no_evidence": []}}
    return doc


def _bench() -> dict:
    doc = fx.bench(16, sizes=[1 << 20, 1 << 22], run_id="job-7")
    doc["run"].update(min_busbw=None, graph=False, check=True, nnodes=None)
    doc["rows"][0]["out_of_place"] = None
    doc["rows"][1]["in_place"]["wrong"] = None
    return doc


def _terminal(render, doc, **kw) -> str:
    buf = io.StringIO()
    render(copy.deepcopy(doc), Console(file=buf, width=100, force_terminal=False, color_system=None), **kw)
    return buf.getvalue()


def _visible_html(html: str) -> str:
    """The text a reader sees (script and style bodies left out) plus attribute values shown as tooltips."""

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.skip, self.out = 0, []

        def handle_starttag(self, tag, attrs):
            if tag in ("script", "style"):
                self.skip += 1
            self.out += [v for k, v in attrs if k in ("title", "aria-label", "alt") and v]

        def handle_endtag(self, tag):
            if tag in ("script", "style"):
                self.skip -= 1

        def handle_data(self, data):
            if not self.skip:
                self.out.append(data)

    parser = Text()
    parser.feed(html)
    return "\n".join(parser.out)


def _assert_readable(text: str, where: str) -> None:
    found = sorted({m.group(0) + ": " + text[max(0, m.start() - 50):m.end() + 20].replace("\n", " ")
                    for m in PYTHON_WORDS.finditer(text)})
    assert not found, f"{where} shows Python values: {found[:5]}"


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_preflight_terminal(verbose):
    from ddpdoctor.report.console import render_preflight

    for doc in (_preflight_with_python_values(), _single_node_doc()):
        _assert_readable(_terminal(render_preflight, doc, verbose=verbose), f"preflight terminal -v{verbose}")


def test_nccl_bench_terminal():
    from ddpdoctor.report.console_bench import render

    _assert_readable(_terminal(render, _bench()), "nccl-bench terminal")


@pytest.mark.parametrize("make", [_trainer_pass, _trainer_hang, lambda: fx.trainer(2, 20)])
def test_run_trainer_terminal(make):
    from ddpdoctor.report.console_trainer import render

    _assert_readable(_terminal(render, make()), "run-trainer terminal")


def test_html_report():
    from ddpdoctor.report.html import build_html

    docs = [_preflight_with_python_values(), _bench(), _trainer_hang()]
    _assert_readable(_visible_html(build_html(docs)), "HTML report (cluster, bench, hung trainer)")
    _assert_readable(_visible_html(build_html([_single_node_doc(), _trainer_pass()])), "HTML report (one node)")


def test_readme_and_reference_examples():
    for path in [ROOT / "README.md", *sorted((ROOT / "ddpdoctor").rglob("*.md"))]:
        _assert_readable("\n".join(_output_blocks(path.read_text())), str(path.relative_to(ROOT)))


def _output_blocks(markdown: str) -> list[str]:
    """The fenced blocks without a language (what a command printed), not code (bash, python, toml)."""
    blocks, current, lang = [], None, None
    for line in markdown.splitlines():
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                if lang in ("", "text"):
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_checks_options_show_defaults_as_set_takes_them():
    """`ddpdoctor checks -v` printed '--set gpu-perf.enabled=False': the value to paste is true/false."""
    from tests.unit.helpers import run_cli  # restores -v's global state afterwards

    res = run_cli("checks", "-v")
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())  # the table wraps the --set lines
    _assert_readable(out, "ddpdoctor checks -v")
    assert "gpu-perf.enabled=false" in out.replace("- ", "-").replace(" .", ".")


def test_the_other_nodes_one_lines():
    """The one line a node other than the master prints (preflight, run-trainer), from documents with unknowns."""
    from ddpdoctor.report.console_trainer import render_node_line
    from ddpdoctor.report.console import render_worker_line

    worker = dict(_preflight_with_python_values(), role="worker", this_node=None, exit_code=None,
                  master={"node": None, "host": None, "output_dir": None})
    _assert_readable(_terminal(render_worker_line, worker), "preflight worker line")
    node = dict(_trainer_hang(), node={"node_rank": None, "nnodes": None, "master_addr": None}, exit_code=None)
    node["root_cause"].update(rank=None, host=None, error_type=None, category=None)
    _assert_readable(_terminal(render_node_line, node), "run-trainer node line")
