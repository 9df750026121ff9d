"""The terminal view of an nccl-bench document: nccl-tests' columns, a footer, the localisation verdict. Host
names come from every rank's node: each line goes through ``T`` (safe_text), escapes shown, never obeyed."""
from __future__ import annotations

from rich.console import Console

from ..report.console import T  # safe_text, then rich's Text

FORMS = ("out_of_place", "in_place")
HEAD = ("#                                                       out-of-place                       in-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)")


def _cells(form: dict | None) -> str:
    if not form:
        return f"{'':>8} {'':>7} {'':>7} {'n/a':>6}"
    wrong = form.get("wrong")
    return (f"{form['time_us']:>8.1f} {form['algbw_gbs']:>7.2f} {form['busbw_gbs']:>7.2f} "
            f"{'N/A' if wrong is None else wrong:>6}")


def row_line(r: dict) -> str:
    """One line in nccl-tests' column order and widths."""
    return (f"{r['size']:>12} {r['count']:>13} {r['dtype']:>9} {r['redop']:>7} {r['root']:>7} "
            f"{_cells(r.get('out_of_place'))} {_cells(r.get('in_place'))}")


def plural(count, noun: str) -> str:
    """'1 node', '3 nodes', '— nodes' (unknown)."""
    return f"{count} {noun}" + ("" if str(count) == "1" else "s")


def render(doc: dict, console: Console) -> None:
    """nccl-tests' format: every '#' line stays one line at any width (a wrapped one would lose its '#')."""
    from ..report.values import human

    run = {k: human(v) for k, v in (doc.get("run") or {}).items()}
    console.print(T(f"# nccl-bench: {run.get('backend')} · {plural(run.get('world_size'), 'rank')} on "
                       f"{plural(run.get('nnodes'), 'node')} · {run.get('dtype')} · warmup {run.get('warmup')} · "
                       f"iters {run.get('iters')}" + (" · CUDA graph" if (doc.get("run") or {}).get("graph") else "")),
                  soft_wrap=True)
    current = None
    for row in doc.get("rows", []):
        title = row["op"] if row.get("group", "all") == "all" else f"{row['op']} ({row['group']}"                 + (f" {row['extra'].get('node')}" if (row.get("extra") or {}).get("node") else "") + ")"
        if title != current:
            current = title
            console.print(T(f"# {title}", style="bold"), soft_wrap=True)
            console.print(T(HEAD), soft_wrap=True)
        console.print(T(row_line(row), style="red" if any((row.get(f) or {}).get("wrong") for f in FORMS) else ""),
                      soft_wrap=True)
    s = doc.get("summary", {})
    console.print(T(f"# Out of bounds values : {s.get('wrong', 0)} {'OK' if not s.get('wrong') else 'FAILED'}",
                       style="green" if not s.get("wrong") else "bold red"), soft_wrap=True)
    console.print(T(f"# Avg bus bandwidth    : {s.get('avg_busbw_gbs', 0):.4f} GB/s"), soft_wrap=True)
    loc = doc.get("localisation")
    if loc:
        for p in loc.get("pairs", []):
            mark = "  <- suspect" if p.get("suspect") else ""
            console.print(T(f"# pair {' + '.join(p['nodes'])}: busbw {p['busbw_gbs']:.3f} GB/s{mark}"), soft_wrap=True)
        for sus in loc.get("suspects", []):
            console.print(T(f"SLOW NODE {sus['node']}: busbw {sus['busbw_gbs']:.3f} GB/s against a good node, "
                               f"median {sus['median_gbs']:.3f} GB/s (threshold {loc['threshold']:g} x median)",
                               style="bold red"))
    if doc.get("verdict") == "fail":
        console.print(T("nccl-bench: FAIL", style="bold red"))
