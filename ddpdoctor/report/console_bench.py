"""The terminal view of an nccl-bench document: nccl-tests' columns (printed row by row while the sweep runs),
a footer, the localisation verdict. Host names come from every rank's node: each line goes through ``T``
(safe_text), escapes shown, never obeyed."""
from __future__ import annotations

from rich.console import Console

from .console import T  # safe_text, then rich's Text

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


def _title(row: dict) -> str:
    if row.get("group", "all") == "all":
        return row["op"]
    node = (row.get("extra") or {}).get("node")
    return f"{row['op']} ({row['group']}" + (f" {node}" if node else "") + ")"


class Table:
    """nccl-tests' table, printed as it grows (every '#' line stays one line at any width: a wrapped one would
    lose its '#'): the run's line once, an op's header when the op changes, each row as it comes; ``rest``
    prints the rows of the finished document not shown yet, then the footer."""

    def __init__(self, console: Console):
        self.console = console
        self.current: str | None = None
        self.headed = False
        self.shown = 0  # rows printed so far: the document's first rows, in its order

    def head(self, run: dict) -> None:
        from .values import human

        if self.headed:
            return
        self.headed = True
        shown = {k: human(v) for k, v in (run or {}).items()}
        self.console.print(T(f"# nccl-bench: {shown.get('backend')} · {plural(shown.get('world_size'), 'rank')} on "
                             f"{plural(shown.get('nnodes'), 'node')} · {shown.get('dtype')} · warmup "
                             f"{shown.get('warmup')} · iters {shown.get('iters')}"
                             + (" · CUDA graph" if (run or {}).get("graph") else "")), soft_wrap=True)

    def row(self, row: dict) -> None:
        title = _title(row)
        if title != self.current:
            self.current = title
            self.console.print(T(f"# {title}", style="bold"), soft_wrap=True)
            self.console.print(T(HEAD), soft_wrap=True)
        self.console.print(T(row_line(row), style="red" if any((row.get(f) or {}).get("wrong") for f in FORMS) else ""),
                           soft_wrap=True)
        self.shown += 1

    def rest(self, doc: dict) -> None:
        self.head(doc.get("run") or {})
        for row in doc.get("rows", [])[self.shown:]:
            self.row(row)
        _footer(doc, self.console)


def render(doc: dict, console: Console) -> None:
    """The whole document at once (--report's and a test's view; the command prints it as it grows)."""
    Table(console).rest(doc)


class LiveRows:
    """The sweep while it runs: each row printed as rank 0 measures it and, on a terminal, rich's progress bar
    below the table (transient: the finished table is what stays). ``feed`` takes the feed's records."""

    def __init__(self, console: Console, bar: bool):
        self.table = Table(console)
        self.bar = None
        if bar and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("rows"), TimeElapsedColumn(), console=console, transient=True)
            self.task = self.bar.add_task("nccl-bench: starting the ranks", total=None)
            self.bar.start()

    def feed(self, records: list[dict]) -> None:
        for record in records:
            if "header" in record:
                self.table.head((record["header"] or {}).get("run") or {})
                if self.bar is not None and isinstance(record["header"].get("planned"), int):
                    self.bar.update(self.task, total=record["header"]["planned"], description="nccl-bench: measuring")
            elif "row" in record:
                self.table.row(record["row"])
                if self.bar is not None:
                    self.bar.advance(self.task)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _footer(doc: dict, console: Console) -> None:
    s = doc.get("summary", {})
    console.print(T(f"# Out of bounds values : {s.get('wrong', 0)} {'OK' if not s.get('wrong') else 'FAILED'}",
                    style="green" if not s.get("wrong") else "bold red"), soft_wrap=True)
    console.print(T(f"# Avg bus bandwidth    : {s.get('avg_busbw_gbs', 0):.4f} GB/s"), soft_wrap=True)
    if doc.get("interrupted") or doc.get("error"):
        planned = doc.get("planned_rows")
        of = f" of {planned}" if isinstance(planned, int) else ""
        why = f"Interrupted ({doc['interrupted']})" if doc.get("interrupted") else "Failed"
        console.print(T(f"# {why} after {len(doc.get('rows') or [])}{of} rows: the figures above are of the rows "
                        "measured before it", style="yellow"), soft_wrap=True)
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
