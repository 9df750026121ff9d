"""The HTML report: one self-contained file (inline CSS, inline SVG, a little optional JS), Jinja2 autoescaped.

Everything that came from a node goes through Jinja2's autoescape, after ``safe_text`` (control characters and
escape sequences shown as ``\x1b``: a report opened with cat or less, or copied from, is not steered by a
peer's host name); the SVG charts are built by svg.py, which does the same for their own labels, and are the
only markup inserted as-is.
"""
from __future__ import annotations

import base64
import functools
import hashlib
from pathlib import Path

from markupsafe import Markup

from ..text import safe_text
from . import svg, viewmodel
from .values import human

TEMPLATES = Path(__file__).parent / "templates"
# No fetch of any kind, and only our own script runs (its hash): markup that slipped past the escaping (an
# injected <script> or onerror= handler) would not execute.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src '{script}'; img-src data:"


@functools.lru_cache(maxsize=1)
def _env():
    """One Environment per process: it compiles each template once (about 250 ms) and caches it; building it
    per report made every report, and the report fuzz test's thousands of them, pay the compile again."""
    from jinja2 import ChainableUndefined, Environment, FileSystemLoader

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=ChainableUndefined,  # optional keys: show what is there
                      trim_blocks=True, lstrip_blocks=True, finalize=_shown)
    # Values as a person reads them (yes/no, "—" for unknown), never Python's True/False/None.
    env.filters["h"] = human
    env.filters["short"] = lambda v, n=160: (human(v) if len(human(v)) <= n else human(v)[: n - 1] + "…") if v is not None else ""
    return env


def _shown(value):
    """Every ``{{ value }}`` as text a terminal or browser shows, never obeys (markup we built passes as is)."""
    from jinja2 import Undefined

    if value is None or isinstance(value, (Markup, Undefined, int, float)):
        return value
    return safe_text(value)


def charts(model: dict) -> dict:
    """The SVG markup of every chart, keyed by section (built here so the template stays declarative)."""
    out: dict = {"clock": "", "bench": [], "trainer": [], "mesh": ""}
    heat = (model.get("mesh") or {}).get("heatmap")
    if heat:
        out["mesh"] = Markup(svg.heatmap("reachability: rows probe columns", heat["labels"], heat["cells"]))
    if model["clock"]:
        out["clock"] = Markup(svg.offsets_chart(
            "clock offset vs the master", [(c["node"], c["label"], c["offset_ms"], c["bound_ms"], c["bad"])
                                           for c in model["clock"]],
            ylabel="offset (ms)", half=model["clock_span"]["half"], step=model["clock_span"]["step"],
            limit=model["clock_limit_ms"], note=model["labels"]))
    for b in model["bench"]:
        per_op = []
        for op, forms in b["series"].items():
            refs = {}
            exp = (b["expected"] or {}).get(op) or {}
            if exp.get("busbw_gbs"):
                refs[f"expected {exp['busbw_gbs']:g} GB/s"] = exp["busbw_gbs"]
            series = {form: [(p[0], p[1]) for p in pts] for form, pts in forms.items()}
            per_op.append({"op": op, "svg": Markup(svg.line_chart(f"{op} bus bandwidth", series, xlabel="message size (B)",
                                                                  ylabel="busbw (GB/s)", log_x=True, log_y=True,
                                                                  refs=refs))})
        nodes_svg = Markup(svg.bars("per-node bus bandwidth (pairs)", b["per_node"], ylabel="busbw (GB/s)",
                                    ref=b["median"])) if b["per_node"] else ""
        out["bench"].append({"ops": per_op, "nodes": nodes_svg})
    for t in model["trainer"]:
        out["trainer"].append({
            "loss": Markup(svg.line_chart("loss per rank", t["loss"], xlabel="step", ylabel="loss")),
            "throughput": Markup(svg.line_chart("throughput per rank", t["throughput"], xlabel="step",
                                                ylabel="tokens/s")),
        })
    return out


def build_html(docs: list[dict]) -> str:
    model = viewmodel.build(docs)
    env = _env()
    css = (TEMPLATES / "report.css").read_text()
    js = (TEMPLATES / "report.js").read_text()
    digest = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
    return env.get_template("report.html").render(m=model, charts=charts(model), css=Markup(css), js=Markup(js),
                                                  csp=CSP.format(script=f"sha256-{digest}"))


def build_history_html(history: dict) -> str:
    """The history page (`ddpdoctor report --history`): views/history.py's model, the same CSS and script."""
    from .views.history import history_view

    view = history_view(history)
    drawn = [{"op": c["op"], "svg": Markup(svg.line_chart(f"{c['op']} bus bandwidth per node", c["series"],
                                                          xlabel="the node's run", ylabel="busbw (GB/s)",
                                                          integer_x=True))}
             for c in view["charts"]]
    lines = [{"node": t["node"], "note": t["note"], "actions": t["actions"], "svg": Markup(svg.timeline(
        f"{t['node']}: check states over time", t["checks"], t["runs"], first_run=t["first_run"]))}
        for t in view["timelines"]]
    js = (TEMPLATES / "report.js").read_text()
    digest = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
    return _env().get_template("history.html").render(h=view, charts=drawn, timelines=lines,
                                                      css=Markup((TEMPLATES / "report.css")
                                                      .read_text()), js=Markup(js),
                                                      csp=CSP.format(script=f"sha256-{digest}"))


def write_history_html(history: dict, path) -> Path:
    from ..documents import write_atomic

    return write_atomic(path, build_history_html(history))


def write_html(docs: list[dict], path) -> Path:
    """Write atomically, so a half-written report is never opened."""
    from ..documents import write_atomic

    return write_atomic(path, build_html(docs))
