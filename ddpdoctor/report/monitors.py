"""A preflight's verdict as other monitors read it (`ddpdoctor preflight --exit-codes STYLE`): the exit code and
what goes on stdout.

- ``nagios`` (also Meta's GCM health_checks, Icinga, Sensu): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the tool could
  not judge: bad input, a cluster that did not assemble, a bug); the first stdout line is the status summary with
  performance data after ``|``, then one line per finding (Nagios' long output).
- ``npd`` (Kubernetes node-problem-detector custom plugin): 0 OK, 1 NonOK, 2 Unknown; stdout is one line of at most
  80 characters (NPD's ``max_output_length`` in its examples). A warning is OK here: a NodeCondition is a node
  problem, and NPD has no third state.
"""
from __future__ import annotations

STYLES = ("ddpdoctor", "nagios", "npd")
NAGIOS = {"pass": 0, "warn": 1, "fail": 2}
NAGIOS_WORD = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}
NPD_OK, NPD_NONOK, NPD_UNKNOWN = 0, 1, 2
NPD_WIDTH = 80


def _one_line(text: str) -> str:
    """One line, without the '|' that starts Nagios' performance data."""
    return " ".join(str(text).replace("|", "/").split())


def _cut(text: str, width: int) -> str:
    text = _one_line(text)
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _problems(doc: dict) -> list[dict]:
    return [r for r in doc.get("results") or [] if r.get("level") in ("fail", "warn")]


def _where(r: dict) -> str:
    nodes = r.get("nodes") or []
    return f" on {','.join(nodes[:3])}{'...' if len(nodes) > 3 else ''}" if nodes else ""


def nagios(doc: dict) -> tuple[int, list[str]]:
    """(exit code, stdout lines) of a preflight document."""
    code = NAGIOS.get(doc.get("verdict", ""), 3)
    counts = {lv: sum(1 for r in doc.get("results") or [] if r.get("level") == lv)
              for lv in ("fail", "warn", "pass", "skip")}
    problems = _problems(doc)
    if problems:
        first = problems[0]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        text = f"{first['check']}{_where(first)}: {_one_line(first.get('summary', ''))}{more}"
    else:
        text = f"{counts['pass']} checks passed, {counts['skip']} skipped"
    perf = " ".join(f"{lv}={n}" for lv, n in counts.items())
    lines = [f"DDPDOCTOR {NAGIOS_WORD[code]} - {_cut(text, 200)} | {perf}"]
    for r in problems:
        fix = f" -- fix: {_one_line(r['fix'])}" if r.get("fix") else ""
        lines.append(f"{r['level'].upper()} {r['check']}{_where(r)}: {_one_line(r.get('summary', ''))}{fix}")
    return code, lines


def npd(doc: dict) -> tuple[int, list[str]]:
    fails = [r for r in _problems(doc) if r.get("level") == "fail"]
    if doc.get("verdict") not in NAGIOS:
        return NPD_UNKNOWN, [_cut(f"ddpdoctor: no verdict ({doc.get('verdict')!r})", NPD_WIDTH)]
    if fails:
        more = f" (+{len(fails) - 1})" if len(fails) > 1 else ""
        return NPD_NONOK, [_cut(f"{fails[0]['check']}: {fails[0].get('summary', '')}{more}", NPD_WIDTH)]
    warns = len(_problems(doc))
    return NPD_OK, [f"ddpdoctor: OK{f', {warns} warning(s)' if warns else ''}"]


def render(doc: dict, style: str) -> tuple[int, list[str]]:
    """A document whose own exit code is neither pass nor fail (5: a cluster node that could not verify the
    master's verdict) is UNKNOWN: the monitor must not read it as OK."""
    if doc.get("exit_code") not in (0, 1, None):
        return unknown(style, f"verdict {doc.get('verdict')} not verified (ddpdoctor exit {doc.get('exit_code')})")
    return nagios(doc) if style == "nagios" else npd(doc)


def unknown(style: str, message: str) -> tuple[int, list[str]]:
    """The tool could not judge (usage error, no cluster, a bug): UNKNOWN, with the error on the line."""
    if style == "nagios":
        return 3, [f"DDPDOCTOR UNKNOWN - {_cut(message, 200)}"]
    return NPD_UNKNOWN, [_cut(f"ddpdoctor: unknown: {message}", NPD_WIDTH)]
