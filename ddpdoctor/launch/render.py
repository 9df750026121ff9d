"""The terminal view of a run-trainer document: the verdict, and on failure one root-cause panel."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text


def render(doc: dict, console: Console) -> None:
    s = doc.get("metrics_summary") or {}
    if doc.get("verdict") == "pass":
        line = (f"run-trainer: PASS · {s.get('steps', 0)} steps on {s.get('ranks', 0)} rank(s) · loss "
                f"{s.get('first_loss')} -> {s.get('final_loss')} · {s.get('tokens_per_s_mean')} tokens/s · "
                f"restarts {doc.get('restarts', 0)} · checksums equal: {doc.get('checksums_equal')}")
        console.print(Text(line, style="green"))
        return
    rc = doc.get("root_cause") or {}
    rows = [
        Text(f"rank {rc.get('rank')} (local rank {rc.get('local_rank')}) on host {rc.get('host')}"
             f" · exit code {rc.get('exit_code')}" + (f" · {rc.get('signal')}" if rc.get("signal") else "")
             + f" · {rc.get('category')}"),
        Text(f"error: {rc.get('error_type') + ': ' if rc.get('error_type') else ''}{rc.get('message') or ''}"),
    ]
    if rc.get("location"):
        rows.append(Text(f"where: {rc['location']}"))
    rows.append(Text(f"fix: {rc.get('fix') or ''}", style="bold"))
    for c in doc.get("consequences", []):
        rows.append(Text(f"consequence: rank {c.get('rank')} on {c.get('host')}: {c.get('reason')} "
                         f"({c.get('category')}{': ' + c['signal'] if c.get('signal') else ''})", style="dim"))
    if doc.get("hang"):
        rows.append(Text(f"stacks of {len(doc['hang'].get('stacks', {}))} rank(s) saved in run.json", style="dim"))
    console.print(Panel(Group(*rows), title=Text("run-trainer: FAIL — root cause", style="bold red"),
                        border_style="red"))
