"""Inline SVG charts, built in Python (no script, no external file): lines on log or linear axes, error bars
and bars with outliers marked. Every label is escaped here, since node names and ops come from files (control
characters shown as ``\x1b``, as everywhere else)."""
from __future__ import annotations

import html
import math

from ..text import safe_text

W, H = 640, 300
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 16, 44


def escape(value) -> str:
    return html.escape(safe_text(value))


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def _scale(lo: float, hi: float, log: bool, a: float, b: float):
    if log:
        lo, hi = math.log10(max(lo, 1e-12)), math.log10(max(hi, 1e-12))
    if hi <= lo:
        hi = lo + 1.0

    def f(v: float) -> float:
        v = math.log10(max(v, 1e-12)) if log else v
        return a + (v - lo) / (hi - lo) * (b - a)
    return f


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        start, stop = math.floor(math.log10(max(lo, 1e-12))), math.ceil(math.log10(max(hi, 1e-12)))
        step = max(1, (stop - start) // 6)
        return [10.0 ** e for e in range(start, stop + 1, step)]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []  # a junk value (inf, nan) in a file: no ticks rather than a crash
    if hi <= lo:
        return [lo]
    step = nice_step((hi - lo) / 5)
    first = math.ceil(lo / step - 1e-9) * step
    count = int(math.floor((hi - first) / step + 1e-9)) + 1
    return [round(first + i * step, 12) for i in range(max(count, 1))]


def int_ticks(lo: float, hi: float) -> list[float]:
    """Ticks on whole numbers only (runs are counted: no tick at run 1.5), 1-2-5 spaced, about six of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    step = max(1, int(nice_step((hi - lo) / 6))) if hi > lo else 1
    first = max(math.ceil(lo / step) * step, math.ceil(lo))
    return [float(v) for v in range(int(first), int(math.floor(hi)) + 1, step)]


def nice_step(raw: float) -> float:
    """The 1-2-5 number nearest ``raw`` (0.2, 0.5, 1, 2, 5, 10, ...): ticks a person reads at a glance, not
    4.8, 8.6, 12.4."""
    exp = math.floor(math.log10(raw))
    return min((m * 10.0 ** exp for m in (1, 2, 5, 10)), key=lambda s: abs(math.log(s / raw)))


def _decades(lo: float, hi: float, log: bool) -> tuple[float, float]:
    """A log axis spans whole decades, so its ticks (powers of ten) all fall inside the plot."""
    if not log:
        return lo, hi
    return (10.0 ** math.floor(math.log10(max(lo, 1e-12))), 10.0 ** math.ceil(math.log10(max(hi, 1e-12))))


def _fmt(v: float) -> str:
    if abs(v) < 1e-9:
        return "0"
    if abs(v) >= 1 << 30 and abs(v) % (1 << 30) == 0:
        return f"{int(v) >> 30}G"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


PLOT_MAX = 1e15  # beyond it a value in a file (1e308 ms of clock offset, a loss of -1e308) is junk, not a point


def plottable(v) -> bool:
    """A number an axis can hold: finite and within ±PLOT_MAX (1e308 - -1e308 overflows the axis' span)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= PLOT_MAX


_finite = plottable


def not_drawn(count: int, what: str = "values") -> str:
    """The chart's note for what it left out: '3 values not drawn (not finite or beyond ±1e15)'."""
    return f"{count} {what} not drawn (not finite or beyond ±{PLOT_MAX:.0e})" if count else ""


def _frame(title: str, xlabel: str, ylabel: str, body: list[str], xt, yt, fx, fy, *, w: int = W, h: int = H,
           pad_b: int = PAD_B, cls: str = "chart") -> str:
    out = [f'<svg viewBox="0 0 {w} {h}" class="{cls}" role="img" '
           f'aria-label="{escape(title)}">', f"<title>{escape(title)}</title>",
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{w - PAD_L - PAD_R}" height="{h - PAD_T - pad_b}" class="plot"/>']
    for t in xt:
        x = fx(t)
        out.append(f'<line x1="{x:.1f}" y1="{PAD_T}" x2="{x:.1f}" y2="{h - pad_b}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{h - pad_b + 14}" class="tick" text-anchor="middle">{escape(_fmt(t))}</text>')
    for t in yt:
        y = fy(t)
        out.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{w - PAD_R}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{PAD_L - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">{escape(_fmt(t))}</text>')
    out.append(f'<text x="{(PAD_L + w - PAD_R) / 2}" y="{h - 6}" class="axis" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{(PAD_T + h - pad_b) / 2}" class="axis" text-anchor="middle" '
               f'transform="rotate(-90 14 {(PAD_T + h - pad_b) / 2})">{escape(ylabel)}</text>')
    out.extend(body)
    out.append("</svg>")
    return "".join(out)


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], *, xlabel: str, ylabel: str,
               log_x: bool = False, log_y: bool = False, refs: dict[str, float] | None = None,
               integer_x: bool = False) -> str:
    """Lines (one per series) with a legend; ``refs`` draws dashed horizontal reference lines; ``integer_x``: x
    counts something (runs), its ticks are whole numbers."""
    # A diverged loss (NaN) or an infinite figure is a real result, but it has no place on an axis.
    given = sum(len(s) for s in series.values())
    series = {name: [(x, y) for x, y in s if _finite(x) and _finite(y)] for name, s in series.items()}
    refs = {name: v for name, v in (refs or {}).items() if _finite(v)}
    pts = [p for s in series.values() for p in s]
    dropped = not_drawn(given - len(pts))
    if not pts:
        return ""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts] + list(refs.values())
    zeros = sum(1 for p in pts if p[1] <= 0) if log_y else 0  # a log axis has no 0: said, never silently dropped
    if zeros:
        dropped = "; ".join(filter(None, [dropped, f"{zeros} value{'s' if zeros != 1 else ''} of 0 or less not drawn "
                                                  "(a log axis has no 0; the table has them)"]))
    if log_y:
        ys = [y for y in ys if y > 0] or [1.0]
    lo_x, hi_x = _decades(min(xs), max(xs), log_x)
    lo_y, hi_y = _decades(min(ys), max(ys), True) if log_y else (min(0.0, min(ys)), max(ys) * 1.05)
    fx = _scale(lo_x, hi_x, log_x, PAD_L, W - PAD_R)
    fy = _scale(lo_y, hi_y, log_y, H - PAD_B, PAD_T)
    body = []
    for i, (name, s) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        good = [(x, y) for x, y in s if x is not None and y is not None and (y > 0 or not log_y)]
        path = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in good)
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        for x, y in good if len(good) <= 64 else []:
            body.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="2.4" fill="{color}"><title>{escape(name)}: '
                        f'{escape(_fmt(x))} → {y:.4g}</title></circle>')
        body.append(f'<text x="{W - PAD_R - 4}" y="{PAD_T + 14 + 13 * i}" class="legend" text-anchor="end" '
                    f'fill="{color}">{escape(name)}</text>')
    for j, (name, v) in enumerate(refs.items()):
        y = fy(v)
        body.append(f'<line x1="{PAD_L}" y1="{y:.1f}" x2="{W - PAD_R}" y2="{y:.1f}" class="ref"/>'
                    f'<text x="{PAD_L + 4}" y="{y - 4:.1f}" class="legend">{escape(name)}</text>')
    xlabel = xlabel + (f" ({dropped})" if dropped else "")
    xt = int_ticks(lo_x, hi_x) if integer_x else _ticks(lo_x, hi_x, log_x)
    return _frame(title, xlabel, ylabel, body, xt, _ticks(lo_y, hi_y, log_y), fx, fy)


def offsets_chart(title: str, points: list[tuple[str, str, float, float, bool]], *, ylabel: str, half: float,
                  step: float, limit: float | None = None, note: str = "") -> str:
    """One point per node with its ± bound (clock offsets): (name, label, value, bound, bad).

    The axis is ±half with a tick every ``step`` (view.clock_axis fits it to the offsets, so sub-millisecond
    offsets are not flattened by the limit); the ±limit band is drawn when it falls on the axis. A point
    beyond the axis (a bad node far off the others) is a triangle at the edge labelled with its value.
    Labels are the short ones given (all of them, or every k-th when they would collide; bad nodes always)."""
    kept = [p for p in points if _finite(p[2]) and _finite(p[3])]
    dropped = not_drawn(len(points) - len(kept), "nodes")
    note = "; ".join(x for x in (note, dropped) if x)
    points = kept
    if not points or not (_finite(half) and _finite(step) and half > 0 and step > 0):
        return ""
    n = len(points)
    wide = n > 24
    w = 1100 if wide else W
    plot_w = w - PAD_L - PAD_R
    slot = plot_w / n
    longest = max(len(lb) for _, lb, _, _, _ in points)
    vertical = longest * 6.2 > slot * 0.95
    every = 1 if not vertical else max(1, math.ceil(11 / slot))
    pad_b = 34 + (int(min(longest, 12) * 6.2) if vertical else 14)
    h = H + (pad_b - PAD_B)
    fx = _scale(-0.5, n - 0.5, False, PAD_L, w - PAD_R)
    fy = _scale(-half, half, False, h - pad_b, PAD_T)
    body = [f'<line x1="{PAD_L}" y1="{fy(0):.1f}" x2="{w - PAD_R}" y2="{fy(0):.1f}" class="zero"/>']
    if limit and limit <= half:
        for v in (limit, -limit):
            body.append(f'<line x1="{PAD_L}" y1="{fy(v):.1f}" x2="{w - PAD_R}" y2="{fy(v):.1f}" class="ref"/>')
    r = 3 if n <= 64 else 2
    ticks: list[str] = []
    bars: dict[str, list[str]] = {}
    for i, (name, label, v, b, bad) in enumerate(points):
        x = fx(i)
        cls = "bad" if bad else "ok"
        tip = f"<title>{escape(name)}: {v:+.3f} ± {b:.3f} ms</title>"
        if abs(v) > half:  # beyond the axis: a triangle at the edge with the figure
            edge = PAD_T + 2 if v > 0 else h - pad_b - 2
            tip_y = edge + (8 if v > 0 else -8)
            body.append(f'<path d="M{x:.1f},{edge} l-5,{9 if v > 0 else -9} h10 z" class="pt-{cls}">{tip}</path>'
                        f'<text x="{x + 7:.1f}" y="{tip_y + 3:.1f}" class="outlier">{escape(label)} {v:+.4g} ms</text>')
        else:
            # the error bars of all nodes as one path per class: at 512 nodes, 512 fewer elements to lay out
            bars.setdefault(cls, []).append(f"M{x:.1f},{fy(max(v - b, -half)):.1f}V{fy(min(v + b, half)):.1f}")
            body.append(f'<circle cx="{x:.1f}" cy="{fy(v):.1f}" r="{r}" class="pt-{cls}">{tip}</circle>')
        if i % every == 0 or bad:
            y = h - pad_b + 12
            if vertical:
                ticks.append(f'<text x="{x + 3:.1f}" y="{y - 8}" class="tick{" tick-bad" if bad else ""}" '
                             f'text-anchor="end" transform="rotate(-90 {x + 3:.1f} {y - 8})">{escape(label)}</text>')
            else:
                ticks.append(f'<text x="{x:.1f}" y="{y}" class="tick{" tick-bad" if bad else ""}" '
                             f'text-anchor="middle">{escape(label)}</text>')
    body[1:1] = [f'<path d="{"".join(d)}" class="bar-{cls}"/>' for cls, d in bars.items()]
    yt = [k * step for k in range(-round(half / step), round(half / step) + 1)]
    xlabel = "node" + (f" ({note})" if note else "")
    return _frame(title, xlabel, ylabel, body + ticks, [], yt, fx, fy, w=w, h=h, pad_b=pad_b,
                  cls="chart wide" if wide else "chart")


def bars(title: str, values: list[tuple[str, float, bool]], *, ylabel: str, ref: float | None = None) -> str:
    """One bar per node; outliers (third field) in red; ``ref`` a dashed line (e.g. the median)."""
    kept = [(name, v, odd) for name, v, odd in values if _finite(v)]
    dropped, values = not_drawn(len(values) - len(kept)), kept
    ref = ref if _finite(ref) else None
    if not values:
        return ""
    n = len(values)
    hi = max([v for _, v, _ in values] + [ref or 0.0, 1e-9]) * 1.1
    fx = _scale(0, n, False, PAD_L, W - PAD_R)
    fy = _scale(0, hi, False, H - PAD_B, PAD_T)
    width = max(1.0, (W - PAD_L - PAD_R) / n * 0.8)
    body = []
    for i, (name, v, odd) in enumerate(values):
        body.append(f'<rect x="{fx(i) + width * 0.1:.1f}" y="{fy(v):.1f}" width="{width:.1f}" '
                    f'height="{fy(0) - fy(v):.1f}" class="{"bar-odd" if odd else "bar"}"><title>{escape(name)}: '
                    f'{v:.4g}</title></rect>')
    if ref is not None:
        body.append(f'<line x1="{PAD_L}" y1="{fy(ref):.1f}" x2="{W - PAD_R}" y2="{fy(ref):.1f}" class="ref"/>')
    return _frame(title, "node" + (f" ({dropped})" if dropped else ""), ylabel, body, [], _ticks(0, hi, False), fx, fy)


HEATMAP_PX = 1024  # the reachability heatmap's side: 512 nodes at 2 px a cell, fewer at larger cells
HEATMAP_FILL = {"ok": "#66bb6a", "slow": "#ffa726", "bad": "#d32f2f"}


def heatmap(title: str, labels: list[str], cells: list[tuple[int, int, str, str]], *, min_cell: int = 2) -> str:
    """A directed reachability matrix too large for a table (above 64 nodes): rows probe columns, one square
    per probed link (``cells``: row, column, state ok/slow/bad, tooltip), a light background where nothing was
    probed, a darker diagonal. Cells are never under ``min_cell`` pixels; every 2^k-th node is labelled."""
    n = max(1, len(labels))
    cell = max(min_cell, HEATMAP_PX // n)
    side = cell * n
    pad = 44
    out = [f'<svg viewBox="0 0 {side + pad + 4} {side + pad + 4}" width="{side + pad + 4}" class="heatmap" '
           f'role="img" aria-label="{escape(title)}" data-cell="{cell}">', f"<title>{escape(title)}</title>",
           f'<rect x="{pad}" y="{pad}" width="{side}" height="{side}" fill="#f3f3f3"/>',
           '<path d="' + "".join(f"M{pad + i * cell},{pad + i * cell}h{cell}v{cell}h-{cell}z" for i in range(n))
           + '" fill="#616161"/>']
    every = 1
    while n / every > 16:
        every *= 2
    for i in range(0, n, every):
        c = pad + i * cell + cell / 2
        out.append(f'<text x="{c:.1f}" y="{pad - 4}" class="tick" text-anchor="middle">{escape(labels[i])}</text>'
                   f'<text x="{pad - 4}" y="{c + 3:.1f}" class="tick" text-anchor="end">{escape(labels[i])}</text>')
    # Reachable links: one path (thousands of squares at 512 nodes cost a few bytes each); slow and failed
    # links, the few that matter, are squares of their own with the link and its figure on hover.
    square = f"h{cell}v{cell}h-{cell}z"
    ok = "".join([f"M{pad + c * cell},{pad + r * cell}{square}" for r, c, state, _ in cells if state == "ok"])
    if ok:
        out.append(f'<path d="{ok}" fill="{HEATMAP_FILL["ok"]}"/>')
    for r, c, state, tip in cells:
        if state != "ok":
            out.append(f'<rect x="{pad + c * cell}" y="{pad + r * cell}" width="{cell}" height="{cell}" '
                       f'fill="{HEATMAP_FILL.get(state, HEATMAP_FILL["bad"])}"><title>{escape(tip)}</title></rect>')
    out.append("</svg>")
    return "".join(out)


LEVEL_FILL = {"pass": "#66bb6a", "skip": "#cfd8dc", "warn": "#ffa726", "fail": "#d32f2f"}
ACTION_MARK = {"drain": ("#b71c1c", "▼ drained"), "resume": ("#1b5e20", "▲ resumed")}


def timeline(title: str, checks: list[str], runs: list[dict], *, first_run: int = 1) -> str:
    """A node's check states over time: a row per check (and the run's verdict on top), a square per run at its
    time coloured by level, the node check's drains and resumes marked at theirs (a line down the rows, the reason
    on hover; the page lists them in words). ``runs``: oldest first, each {run_id, created, context, verdict,
    action, reason, levels: {check: level}}; x: UTC time (runs close together overlap; 20 health checks and a
    drain loop in 20 minutes read as 20 minutes, not as 20 runs)."""
    if not runs:
        return ""
    rows = ["verdict", *checks]
    left, top, row_h = 150, 30, 14
    span = W - left - PAD_R
    cell = max(3.0, min(16.0, span / len(runs)))
    t0, t1 = runs[0].get("created") or 0.0, runs[-1].get("created") or 0.0
    scale = (span - cell) / (t1 - t0) if t1 > t0 else 0.0
    h = top + row_h * len(rows) + 36
    out = [f'<svg viewBox="0 0 {W} {h}" width="{W}" class="timeline" role="img" aria-label="{escape(title)}">',
           f"<title>{escape(title)}</title>"]
    for i, name in enumerate(rows):
        out.append(f'<text x="{left - 6}" y="{top + row_h * i + 11}" class="tick" text-anchor="end">'
                   f"{escape(name)}</text>")
    for j, run in enumerate(runs):
        x = left + ((run.get("created") or t0) - t0) * scale
        where = f"{utc_text(run.get('created'))}, run {first_run + j} ({run.get('run_id')}, {run.get('context')})"
        for i, name in enumerate(rows):
            level = run.get("verdict") if name == "verdict" else (run.get("levels") or {}).get(name)
            if level in LEVEL_FILL:
                out.append(f'<rect x="{x:.1f}" y="{top + row_h * i}" width="{max(cell - 1, 1):.1f}" height="{row_h - 2}"'
                           f' fill="{LEVEL_FILL[level]}"><title>{escape(where)}: {escape(name)} {escape(level)}'
                           "</title></rect>")
        if run.get("action") in ACTION_MARK:
            color, word = ACTION_MARK[run["action"]]
            cx = x + cell / 2
            why = f": {run['reason']}" if run.get("reason") else ""
            out.append(f'<line x1="{cx:.1f}" y1="{top - 4}" x2="{cx:.1f}" y2="{top + row_h * len(rows)}" '
                       f'stroke="{color}" stroke-width="1.5" stroke-dasharray="3,2"/>'
                       f'<text x="{cx:.1f}" y="{top - 8}" class="legend" text-anchor="middle" fill="{color}">'
                       f"{escape(word.split()[0])}<title>{escape(where)}: {escape(word)}{escape(why)}</title></text>")
    axis_y = top + row_h * len(rows) + 12
    ticks, step = _time_ticks(t0, t1)
    for t in ticks:
        x = left + (t - t0) * scale + cell / 2
        out.append(f'<text x="{x:.1f}" y="{axis_y}" class="tick" text-anchor="middle">{escape(_clock(t, t1 - t0, step))}'
                   "</text>")
    legend = " · ".join(f"{k}" for k in LEVEL_FILL) + " · ▼ drained · ▲ resumed"
    out.append(f'<text x="4" y="{axis_y + 16}" class="axis">UTC time, {escape(utc_text(t0))} → '
               f'{escape(utc_text(t1))} '
               f'({escape(legend)})</text>')
    out.append("</svg>")
    return "".join(out)


def utc_text(epoch, missing: str = "?") -> str:
    """A Unix time as the pages write it: 2026-12-02 21:03:15Z."""
    import datetime as dt

    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool):
        return missing
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


DAY_S, WEEK_S = 86400, 604800
# A time axis's tick spacings, a second to a week; a longer span ticks whole weeks, as many as keep six ticks
TIME_STEPS_S = (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, DAY_S, 2 * DAY_S, WEEK_S)


def _clock(epoch: float, span_s: float, step_s: float) -> str:
    """A tick's label, as precise as its spacing: seconds within ten minutes, the time of day within two days,
    the date and time when the ticks are hours apart over days, the date beyond (with the year past 300 days)."""
    import datetime as dt

    t = dt.datetime.fromtimestamp(epoch, dt.timezone.utc)
    if span_s < 600:
        return t.strftime("%H:%M:%S")
    if step_s < DAY_S:
        return t.strftime("%H:%M" if span_s < 2 * DAY_S else "%m-%d %H:%M")
    return t.strftime("%Y-%m-%d" if span_s > 300 * DAY_S else "%m-%d")


def _time_ticks(t0: float, t1: float, most: int = 6) -> tuple[list[float], float]:
    """Round times between t0 and t1 (a second, a minute, 5, ... a day, a week apart, whole weeks beyond), at
    most ``most`` and their spacing."""
    if t1 <= t0:
        return [t0], 1.0
    step = next((s for s in TIME_STEPS_S if (t1 - t0) / s <= most), None)
    if step is None:
        step = WEEK_S * math.ceil((t1 - t0) / (most * WEEK_S))
    first = -(-t0 // step) * step
    return [first + i * step for i in range(int((t1 - first) // step) + 1)], step
