"""The view of nccl-bench documents: busbw curves per collective, settings, hosts, per-node figures of the
localisation and the one-line failure (pure; no HTML)."""
from __future__ import annotations

from ...grouping import number_ranges
from ...numbers import parse_int
from .common import _finite, _label, single_group


def bench_failure(d: dict) -> str:
    s = d.get("summary") or {}
    parts = []
    if s.get("wrong"):
        parts.append(f"{s['wrong']} wrong element(s)")
    sus = (d.get("localisation") or {}).get("suspects") or []
    if sus:
        parts.append("slow node(s): " + ", ".join(f"{x['node']} ({x['busbw_gbs']:.3g} GB/s vs median "
                                                  f"{x['median_gbs']:.3g})" for x in sus))
    if not parts and (d.get("run") or {}).get("min_busbw") is not None:
        parts.append(f"average busbw {s.get('avg_busbw_gbs')} GB/s under --min-busbw {d['run']['min_busbw']}")
    if d.get("error"):
        parts.append(str((d["error"] or {}).get("message")))
    return "nccl-bench failed: " + ("; ".join(parts) or "see the table")


BENCH_SETTINGS = [("backend", "backend"), ("world_size", "world size"), ("nnodes", "nodes"),
                  ("nproc_per_node", "ranks per node"), ("dtype", "dtype"), ("ops", "ops"), ("sizes", "sizes"),
                  ("warmup", "warmup iters"), ("iters", "iters"), ("graph", "CUDA graph"), ("check", "data check"),
                  ("min_busbw", "--min-busbw (GB/s)"), ("wall_s", "wall time (s)")]


def _bytes(n) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if _finite(n) and n >= size and n % size == 0:
            return f"{int(n) // size} {unit}"
    return f"{n} B"


def bench_settings(run: dict) -> list[tuple[str, str]]:
    """The run's settings as (label, text), only those the document has."""
    out = []
    for key, label in BENCH_SETTINGS:
        v = run.get(key)
        if v is None or v == "" or v == []:
            continue
        if key == "sizes" and isinstance(v, list) and v and all(_finite(x) for x in v):
            text = f"{_bytes(min(v))} … {_bytes(max(v))} ({len(v)} sizes)" if len(v) > 1 else _bytes(v[0])
        elif isinstance(v, list):
            text = ", ".join(str(x) for x in v)
        elif isinstance(v, bool):
            text = "yes" if v else "no"
        else:
            text = str(v)
        out.append((label, text))
    if not run.get("sizes") and _finite(run.get("min_bytes")) and _finite(run.get("max_bytes")):
        out.append(("sizes", f"{_bytes(run['min_bytes'])} … {_bytes(run['max_bytes'])}"))
    return out


def _ranges(ints: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3, 8" (grouping's ranges, as a sentence lists them)."""
    return number_ranges([str(v) for v in sorted(set(ints))], sep=", ") if ints else ""


def bench_hosts(hosts) -> dict:
    """Which ranks ran on which host, the hosts in rank order; a short line naming them all."""
    by_host: dict[str, list[int]] = {}
    for rank, host in (hosts or {}).items() if isinstance(hosts, dict) else ():
        r = parse_int(rank)
        if r is None:
            continue
        by_host.setdefault(str(host), []).append(r)
    rows = [{"host": h, "ranks": _ranges(rs), "count": len(rs)} for h, rs in
            sorted(by_host.items(), key=lambda kv: min(kv[1]))]
    per = sorted({r["count"] for r in rows})
    line = ""
    if rows:
        line = f"{len(rows)} host(s)" + (f", {per[0]} rank(s) each" if len(per) == 1 else "") + \
               f": {_label([r['host'] for r in rows], 0, 160)}"
    # The usual layout (host i runs ranks k*i .. k*i+k-1) is said in words; any other is listed host by host.
    k = per[0] if len(per) == 1 else 0
    regular = bool(k) and all(r["ranks"] == (f"{i * k}-{i * k + k - 1}" if k > 1 else str(i))
                              for i, r in enumerate(rows))
    if regular and len(rows) > 1:
        line += f"; the i-th host runs ranks {k}i … {k}i+{k - 1}" if k > 1 else "; host i runs rank i"
    return {"rows": [] if regular and len(rows) > 16 else rows, "line": line}


def bench_view(d: dict) -> dict:
    series: dict[str, dict[str, list]] = {}
    for r in d.get("rows", []):
        if r.get("group", "all") != "all":
            continue
        for form in ("out_of_place", "in_place"):
            f = r.get(form)
            if f:
                series.setdefault(r["op"], {}).setdefault(form.replace("_", "-"), []).append(
                    (r["size"], f.get("busbw_gbs"), f.get("time_us"), f.get("wrong")))
    loc = d.get("localisation") or {}
    pairs = loc.get("pairs") or []
    per_node: dict[str, float] = {}
    for p in pairs:
        for n in p.get("nodes", []):
            per_node[n] = min(per_node.get(n, float("inf")), p.get("busbw_gbs") or 0.0)
    suspects = {s.get("node") for s in loc.get("suspects") or []}
    run = d.get("run") or {}
    return {"run": run, "summary": d.get("summary") or {}, "verdict": d.get("verdict"),
            "settings": bench_settings(run), "hosts": bench_hosts(d.get("hosts")),
            "series": series, "expected": d.get("expected") or {}, "localisation": loc,
            "per_node": [(n, v, n in suspects) for n, v in sorted(per_node.items())],
            "median": loc.get("median_gbs"), "rows": [r for r in d.get("rows", []) if r.get("group", "all") != "all"],
            "interrupted": interrupted_line(d)}


def interrupted_line(d: dict) -> str:
    """A sweep cut short by a signal or a failed rank: what it measured before it (nccl-bench keeps those rows)."""
    planned = d.get("planned_rows")
    if not d.get("interrupted") and not (d.get("error") and planned is not None):
        return ""
    of = f" of {planned}" if isinstance(planned, int) and not isinstance(planned, bool) else ""
    why = f"interrupted ({d['interrupted']})" if d.get("interrupted") else "failed"
    return f"{why} after {len(d.get('rows') or [])}{of} rows: the figures are of the rows measured before it"


def bench_finding(d: dict) -> dict | None:
    """A failed benchmark as a finding of its own (a group of one naming the slow nodes), else None."""
    if d.get("verdict") != "fail":
        return None
    suspects = [s["node"] for s in (d.get("localisation") or {}).get("suspects", [])]
    return single_group({
        "check": "nccl-bench", "level": "fail", "nodes": suspects, "summary": bench_failure(d),
        "fix": "drain the named node(s) and rerun nccl-bench --localise; check its NICs, cables and GPUs "
               "(ddpdoctor preflight --perf)",
        "actual": (d.get("summary") or {}).get("avg_busbw_gbs"), "expected": None})
