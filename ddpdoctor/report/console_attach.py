"""The terminal view of an `attach` document: the verdict line (rank, host, file:line), what the others wait in,
the fix, then one row per rank. Text read from the job's processes passes through safe_text."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..human import human_bytes
from ..rank_lists import MAX_CULPRIT_ROWS, ranks_text, total
from ..text import safe_text
from .console import auth_line

_STYLE = {"progressing": "green", "unreadable": "yellow", "no_movement": "yellow"}


def worker_line(doc: dict) -> str:
    """A node other than the master: how many ranks it read and sent to the master (its own document keeps none
    of their stacks: the master's holds them all), and that the master prints the verdict."""
    sent = doc.get("ranks_sent")
    count = len(doc.get("ranks") or []) if not isinstance(sent, int) else sent
    master = f" at {safe_text(doc['master'])}" if doc.get("master") else ""
    return safe_text(f"ddpdoctor attach [{doc.get('host')}]: {count} rank(s) read here and sent to the master"
                     f"{master}, which prints the verdict and keeps every node's ranks (exit {doc.get('exit_code')})")


def render(doc: dict, console: Console) -> None:
    diag = doc.get("diagnosis") or {}
    if doc.get("role") == "worker":
        console.print(Text(worker_line(doc)), soft_wrap=True)
        auth_line(doc, console)
        return
    category = str(diag.get("category", "?"))
    job = doc.get("job") or {}
    head = Text(f"ddpdoctor attach [{safe_text(doc.get('host'))}] job {safe_text(job.get('id'))} "
                f"({safe_text(job.get('launcher') or 'no launcher')}, world {safe_text(job.get('world_size'))}): ",
                style="bold")
    head.append(safe_text(diag.get("summary", "")), style=_STYLE.get(category, "red"))
    console.print(head, soft_wrap=True)
    culprits = diag.get("culprits") or []
    unread = set(job.get("ranks_elsewhere") or []) if doc.get("role") != "master" else set()
    for c in culprits[:MAX_CULPRIT_ROWS]:
        line = f"  rank {c.get('rank')}" + (f" on {c['host']}" if c.get("host") else "") + \
            (f" at {c['where']}" + (f" in {c['function']}" if c.get("function") else "") if c.get("where") else "")
        if c.get("rank") in unread:
            line += " (not read: no process of it on this node)"
        console.print(safe_text(line), soft_wrap=True)
    if total(diag, "culprits") > MAX_CULPRIT_ROWS:  # a world the job claims: the rest as ranges, one line
        console.print(safe_text(f"  culprits: {total(diag, 'culprits')} in all, rank(s) {ranks_text(diag, 'culprits')}"),
                      soft_wrap=True)
    if job.get("ranks_elsewhere"):
        console.print(f"rank(s) {ranks_text(job, 'ranks_elsewhere')} not read: no process of theirs here (other "
                      "nodes, or ended), so nothing is known of where they are; on a multi-node job run attach on "
                      "every node with --master", soft_wrap=True)
    if diag.get("nodes_without_ranks"):
        console.print(Text(f"no rank of the job runs on: {_ranks(safe_text(n) for n in diag['nodes_without_ranks'])}"),
                      soft_wrap=True)
    if isinstance(diag.get("ras"), dict) and diag["ras"].get("said"):  # NCCL RAS beside the records' verdict
        console.print(safe_text(str(diag["ras"]["said"])), soft_wrap=True)
    console.print(Text("Fix: ", style="bold").append(safe_text(diag.get("fix", ""))), soft_wrap=True)
    table = Table(box=None, pad_edge=False)
    for name in ("rank", "pid", "in", "where", "moved", "cpu", "i/o"):
        table.add_column(name, overflow="fold", no_wrap=name in ("rank", "pid", "moved", "cpu", "i/o"))
    for r in doc.get("ranks") or []:
        wait = r.get("wait") or {}
        what = r.get("failure") and f"not read: {r.get('error')}" or _what(wait)
        table.add_row(str(r.get("rank")), str(r.get("pid")), safe_text(what),
                      safe_text(f"{r.get('where') or ''}" + (f" ({r['function']})" if r.get("function") else "")),
                      {True: "yes", False: "no"}.get(r.get("moved"), "-"), _cpu(r.get("cpu")), _io(r.get("io_bytes_s")))
    console.print(table)
    for line in doc.get("notes") or []:  # what a job named that attach did not use, and why
        console.print(Text(f"note: {safe_text(line)}", style="yellow"), soft_wrap=True)
    if doc.get("stopped"):
        console.print(f"--stop: sent {doc['stopped']['signal']} to {_ranks(doc['stopped']['pids'])}")
    auth_line(doc, console)  # several nodes: how their messages were protected


def _what(wait: dict) -> str:
    kind = wait.get("kind")
    if kind in (None, "none", "unknown"):
        return "its own code" if kind == "none" else "?"
    if kind in ("send", "recv"):
        return f"{wait.get('op')}({'dst' if kind == 'send' else 'src'}={wait.get('peer')})"
    if wait.get("library"):  # a library's wait: "DDP: all_reduce", "FSDP2: reduce_scatter" ("?" where unproven)
        return f"{wait['library']}: {wait.get('op') or kind}" + ("" if wait.get("certain", True) else "?")
    return str(wait.get("op") or kind)


def _cpu(share) -> str:
    """The share of a core a rank used over the last window, as a person reads it."""
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        return "-"
    return f"{share * 100:.0f} %"


def _io(rate) -> str:
    """The bytes a rank read and wrote per second over the last window, as a person reads them."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0:
        return "-"
    return f"{human_bytes(int(rate))}/s"


def _ranks(values) -> str:
    return ", ".join(str(v) for v in values)
