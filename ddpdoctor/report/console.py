"""The terminal rendering of a preflight document: verdict, failures first with their fixes, then the rest.

Every string that came from a node (hostnames, env values, messages) is wrapped in ``rich.text.Text``,
which rich never parses as markup: a hostname like ``[red]x`` or ``<img ...>`` prints literally; and it
passes ``safe_text`` first, so a peer's control characters and escape sequences are shown, not obeyed.
"""
from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..documents import own_results
from ..grouping import compress_hosts
from ..text import safe_text  # noqa: F401 - re-exported: renderers import safe_text from here
from .values import UNKNOWN, human  # noqa: F401 - re-exported: renderers import human from here

STYLE = {"pass": "green", "skip": "dim", "warn": "yellow", "fail": "bold red"}
ICON = {"pass": "PASS", "skip": "SKIP", "warn": "WARN", "fail": "FAIL"}


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=False)


def T(value: Any = "", style: str = "") -> Text:
    """A rich Text of a safe string (never markup, never a control sequence)."""
    return Text(safe_text(value), style=style)


def _short(value: Any, limit: int = 120) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else repr(value) if not isinstance(value, (dict, list)) else _compact(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"), default=str)


def _nodes(result: dict, limit: int = 6) -> str:
    nodes = result.get("nodes") or []
    if len(nodes) <= limit:
        return ", ".join(nodes)
    return ", ".join(nodes[:limit]) + f" (+{len(nodes) - limit} more)"


def render_preflight(doc: dict, console: Console, *, verbose: int = 0, quiet: bool = False,
                     shown_by: str = "without -q") -> None:
    """Verdict line, then one panel per distinct problem (naming its nodes), then one line per passing
    check: the length depends on the problems, not on the number of nodes. ``quiet``: the verdict and the
    failures only, the warnings named in one line (``shown_by`` says how to see them)."""
    from ..grouping import group_results

    results = doc.get("results", [])
    verdict = doc.get("verdict", "pass")
    counts = {lv: sum(1 for r in results if r["level"] == lv) for lv in ICON}
    nodes = doc.get("nodes", {})
    groups = doc.get("groups") or group_results(results, len(nodes))
    scope = doc.get("scope", "node")
    title = Text.assemble(
        ("ddpdoctor preflight ", "bold"),
        (f"[{scope}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}] ", ""),
        ("verdict: ", "bold"),
        (verdict.upper(), STYLE.get(verdict, "")),
    )
    tally = f"{counts['fail']} fail · {counts['warn']} warn · {counts['pass']} pass · {counts['skip']} skip"
    if title.cell_len + 3 + len(tally) <= console.width:
        console.print(Text.assemble(title, "   " + tally), soft_wrap=True)
    else:  # never wrapped mid-phrase (`... 3 \nskip`): the tally gets its own line
        console.print(title, soft_wrap=True)
        console.print(Text("  " + tally), soft_wrap=True)
    auth_line(doc, console)

    for g in groups:
        if g["level"] == "fail" or (g["level"] == "warn" and not quiet):
            view = _group_view(g, results)
            console.print(_finding_panel(view, verbose))
            _fix_line(view, console)

    if quiet:  # -q: "only the verdict and failures"; the warnings are named, one line
        warned = list(dict.fromkeys(g["check"] for g in groups if g["level"] == "warn"))
        if warned:
            console.print(T(f"  {len(warned)} warning{'s' if len(warned) != 1 else ''} not shown: "
                            f"{', '.join(warned)}; {shown_by} each is shown with its fix", style="yellow"),
                          soft_wrap=True)
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("level", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("node(s)", overflow="fold")
    table.add_column("result")
    for g in groups:
        if g["level"] in ("fail", "warn"):
            continue  # already shown above, with their fixes
        first = results[g["members"][0]]
        text = first["summary"]  # the node column says where; one example says what
        if verbose and g["count"] == 1:
            text += f"  (measured: {_short(human(first.get('actual')))})"
        table.add_row(T(ICON[g["level"]], STYLE[g["level"]]), T(g["check"]), T(g["where"]), T(text))
    if table.row_count:
        console.print(table)
    for line in doc.get("advice") or []:
        # soft_wrap: a command is one line however narrow the terminal, so a paste never breaks it
        console.print(T(line), soft_wrap=True)


def _unauthenticated(doc: dict) -> dict:
    """The document's auth state when its run was not authenticated (its messages could have been forged)."""
    auth = doc.get("auth") if isinstance(doc.get("auth"), dict) else {}
    return auth if auth and not auth.get("authenticated", True) else {}


def _unverified(doc: dict) -> bool:
    """A node that could not check the master's signature: the verdict it shows is what it received."""
    return _unauthenticated(doc).get("verdict_verified") is False


def auth_line(doc: dict, console: Console) -> None:
    """NOT VERIFIED / NOT AUTHENTICATED, when the document's cluster run was (any command run across nodes)."""
    auth = _unauthenticated(doc)
    if _unverified(doc):
        console.print(Text.assemble(("NOT VERIFIED: ", "bold yellow"),
                                    f"this node had neither --token nor the run's key file, so the verdict above "
                                    f"could be a forgery; exit {human(doc.get('exit_code'))} says so, whatever it "
                                    f"claims"), soft_wrap=True)
    if auth:
        console.print(Text.assemble(("NOT AUTHENTICATED: ", "bold yellow"), safe_text(str(auth.get("note", ""))),
                                    ("  fix: ", "bold cyan"), safe_text(str(auth.get("fix", "")))), soft_wrap=True)


def other_node_line(head: str, verdict: str, detail: str, where: str, hint: str = "") -> Text:
    """The one line a node other than the cluster's printing node shows (preflight's workers, run-trainer's
    nodes past rank 0): "HEAD VERDICT (DETAIL): WHERE; HINT". Every part is made display-safe here."""
    return Text.assemble((safe_text(head), "bold"), (verdict.upper(), STYLE.get(verdict, "")),
                         f" ({safe_text(detail)}): ", safe_text(where), safe_text(hint))


def render_worker_line(doc: dict, console: Console, *, hints: bool = True) -> None:
    """A node other than the master: one line (the cluster's verdict, its exit code, where the master printed
    the summary and wrote the cluster result), so a launcher that merges every node's output (srun) shows one
    summary per cluster, not one per node. What only this node saw (messages it refused) follows as panels:
    the master cannot know it."""
    results = doc.get("results", [])
    verdict = doc.get("verdict", "pass")
    master = doc.get("master") or {}
    counts = {lv: sum(1 for r in results if r["level"] == lv) for lv in ("fail", "warn")}
    tally = ", ".join(f"{n} {lv}" for lv, n in counts.items() if n) or "no problem found"
    who = master.get("node") or "the master"
    if master.get("output_dir"):
        where = f"{who} printed the full summary and wrote the cluster result to {master['output_dir']}/cluster.json"
        if master.get("host") and master["host"] != who:
            where += f" on {master['host']}"
    elif hints:
        where = f"{who} printed the full summary (add --output DIR to keep the cluster result in DIR/cluster.json)"
    else:
        where = f"{who} printed the full summary"
    head = f"ddpdoctor preflight [{human(doc.get('this_node'))}] cluster verdict: "
    if _unauthenticated(doc):  # the verdict itself could be a forgery: said on its own line
        tally += ", NOT AUTHENTICATED"
    if _unverified(doc):
        head = f"ddpdoctor preflight [{human(doc.get('this_node'))}] cluster verdict NOT VERIFIED, as received: "
    console.print(other_node_line(head, verdict, f"exit {human(doc.get('exit_code', 0))}, {tally}", where,
                                  "; -v prints it here too" if hints else ""), soft_wrap=True)
    auth_line(doc, console)
    own = own_results(doc)
    for r in own:
        if r["level"] in ("fail", "warn"):
            console.print(_finding_panel(r, 0))
            _fix_line(r, console)


def _fix_line(r: dict, console: Console) -> None:
    """A result's fix, outside its panel and never wrapped (a fix is often a command to paste), or why it is
    withheld (an unauthenticated run: the document's ``fix_withheld``)."""
    if r.get("fix"):
        console.print(Text.assemble(("  fix: ", "bold cyan"), safe_text(r["fix"])), soft_wrap=True)
    elif r.get("fix_withheld"):
        console.print(Text.assemble(("  fix withheld: ", "bold yellow"), safe_text(str(r["fix_withheld"]))),
                      soft_wrap=True)


def _group_view(group: dict, results: list[dict]) -> dict:
    """A group shown like one result: its nodes named compactly, measured/expected of its first member."""
    first = results[group["members"][0]]
    view = dict(first, nodes=[group["where"]] if group["where"] else [])
    if group["count"] > 1:
        alike = (f"{group['count']} alike, each naming {compress_hosts(group['common'])}" if group.get("common")
                 else f"same on {len(group['nodes']) or group['count']} nodes")
        view["summary"] = f"{first['summary']}  [{alike}]"
        view["actual"] = f"{human(first.get('actual'))} (on {first['nodes'][0]})" if first.get("nodes") else first.get("actual")
    return view


def _finding_panel(r: dict, verbose: int) -> Panel:
    body: list[Any] = [T(r["summary"])]
    if r.get("nodes"):
        body.append(Text.assemble(("node(s): ", "bold"), safe_text(_nodes(r, limit=12))))
    if r.get("actual") not in (None, "", [], {}):
        body.append(Text.assemble(("measured: ", "bold"), safe_text(_short(human(r["actual"]), 300))))
    if r.get("expected") not in (None, "", [], {}):
        body.append(Text.assemble(("expected: ", "bold"), safe_text(_short(human(r["expected"]), 300))))
    if verbose and r.get("details", {}).get("traceback"):
        body.append(T(r["details"]["traceback"], "dim"))
    style = STYLE.get(r["level"], "")
    return Panel(Group(*body), title=T(f"{ICON[r['level']]} {r['check']}", style), title_align="left",
                 border_style="red" if r["level"] == "fail" else "yellow", expand=True)
