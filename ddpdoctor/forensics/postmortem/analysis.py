"""Post-mortem of a torchrun job: which rank failed first, on which host, why, and what to do.

Two parts here: reading torch's records (through ``job_files``' bounded reads) and classifying each rank's
failure (``classify``: the rules, exception parsing). Attributing them (the root cause versus its consequences,
the ranks that never failed but were waited for) is decide()'s (judge/attribution.py ``attribute``).

Sources, all written by torch itself: the agent's failure summary (rank, host, exit code, error file),
every rank's error.json (@record: exception, traceback, timestamp) and its stderr log. The root cause is the
earliest real failure; ranks the agent stopped (SIGTERM) and ranks whose collective broke because a peer
died or timed out are consequences, listed as such.
"""
from __future__ import annotations

import re
from pathlib import Path

from ...numbers import parse_int
from ..evidence import job_files
from ..evidence.job_files import global_rank_of
from ..judge import attribution
from ..evidence.model import RankFailure
from ..judge.verdict import AttemptRecords, Findings
from ..judge.classify import (ABORT, classify, exception_line, last_traceback,
                              user_frame)
from .node_folders import (attempts, other_nodes, rank_dir_of, ranks_without_record,  # noqa: F401 (engine's too)
                           same_job_runs, silent_ranks)

TAIL_LINES = 40
# Line breaks as [ \t]*\r?\n[ \t]*, never \s*\n\s* (both \s* can take the newlines: quadratic on a run of blank
# lines); numbers at most 9 digits (int() of a 10 MB digit string is an error, not a rank).
_NL = r"[ \t]*\r?\n[ \t]*"
SUMMARY_BLOCK = re.compile(
    rf"\[\d{{1,9}}\]:{_NL}time[ \t]*:[ \t]*(?P<time>\S+){_NL}host[ \t]*:[ \t]*(?P<host>\S+){_NL}rank[ \t]*:[ \t]*"
    rf"(?P<rank>-?\d{{1,9}})[ \t]*\(local_rank:[ \t]*(?P<local>-?\d{{1,9}})\)[^\n]*\n[ \t]*exitcode[ \t]*:[ \t]*"
    rf"(?P<code>-?\d{{1,9}})(?:[ \t]*\(pid:[ \t]*(?P<pid>\d{{1,9}})\))?[^\n]*\n[ \t]*error_file[ \t]*:[ \t]*(?P<file>[^\n]+)")
# torchrun's own line when a worker outlived its SIGTERM grace period (30 s) and it sent SIGKILL instead.
FORCED_KILL = re.compile(r"Unable to shutdown process (\d{1,9}) via \d{1,3}, forcefully exiting via 9")
# faulthandler's line when a signal killed the process (PYTHONFAULTHANDLER): a C++ abort, a segfault.
FATAL = re.compile(r"^Fatal Python error: (Aborted|Segmentation fault|Bus error|Floating point exception)", re.M)
FATAL_SIGNALS = {"Aborted": 6, "Segmentation fault": 11, "Bus error": 7, "Floating point exception": 8}
# torchrun's agent, stopping the ranks still running after a failure: "Sending process 31723 closing signal SIGTERM"
CLOSING_SIGNAL = re.compile(r"Sending process (\d{1,9}) closing signal SIG(?:TERM|INT)")
# torchrun itself stopped from outside (a scheduler's time limit or scancel sends SIGTERM to every process of the
# job): "SignalException: Process 16082 got signal: 15", or its "Received <signal> death signal" line, which is
# what remains when the scheduler's SIGKILL (KillWait later) ends torchrun while it waits for its workers to stop.
# The signal prints as "Signals.SIGTERM" under Python 3.10 and as "15" from 3.11 (an IntEnum's str is its number).
AGENT_SIGNALLED = re.compile(r"SignalException: Process \d{1,9} got signal: (\d{1,2})|"
                             r"Received (?:Signals\.(SIG[A-Z]{2,6})|(\d{1,2})) death signal")


def agent_signal(text: str) -> str | None:
    """The signal torchrun received from outside, named (SIGTERM), from its own output; None if it got none."""
    import signal

    for m in AGENT_SIGNALLED.finditer(text or ""):
        if m.group(2):
            return m.group(2)
        try:
            return signal.Signals(int(m.group(1) or m.group(3))).name
        except ValueError:
            continue
    return None


# torchrun's failure table names the job's entry point: "crash.py FAILED", "mypkg.train FAILED" (its script or module)
ENTRY_FAILED = re.compile(r"^(\S{1,4096}) FAILED[ \t]*$", re.M)


def entry_point(text: str) -> tuple[str | None, str | None]:
    """(script, module) of the job, as torchrun's failure table names it; (None, None) where none does."""
    m = ENTRY_FAILED.search(text or "")
    if not m:
        return None, None
    name = m.group(1)
    return (name, None) if name.endswith(".py") or "/" in name else (None, name)


def parse_agent_summary(text: str) -> list[dict]:
    """torchrun's ChildFailedError table: one dict per failed rank."""
    out = []
    for m in SUMMARY_BLOCK.finditer(text or ""):
        out.append({"time": m["time"], "host": m["host"], "rank": int(m["rank"]), "local_rank": int(m["local"]),
                    "exit_code": int(m["code"]), "error_file": m["file"].strip(),
                    "pid": int(m["pid"]) if m["pid"] else None})
    forced = {int(pid) for pid in FORCED_KILL.findall(text or "")}
    for rec in out:
        rec["forced_kill"] = rec["exit_code"] == -9 and rec["pid"] in forced
    return out


def read_error_file(path: Path) -> dict | None:
    """torch's error file, read under evidence_io's bounds (size, regular file, shape)."""
    return job_files.read_error_file(path)


def tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = job_files.STDERR_TAIL_BYTES,
         keep_prefix: bool = False) -> str:
    """The last lines of a log, reading at most its last ``max_bytes`` (a rank's log can be gigabytes). torch's
    `[rankN]:` prefix is cut from the lines kept only (over a whole 512 KiB tail, 10,000 ranks' logs spent most
    of a postmortem's time in that one substitution), unless ``keep_prefix`` (torchrun's own output: the prefix
    says whose line it relays)."""
    kept = job_files.read_tail(path, max_bytes).splitlines()[-lines:]
    return "\n".join(kept if keep_prefix else (RANK_PREFIX.sub("", line, count=1) for line in kept))


RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]: ?", re.M)  # torch prefixes every worker line with its rank


# A worker's line as torchrun relays it on its own stderr when the ranks' output is not redirected (torchelastic's
# default log dir then holds no stderr.log): "[rank1]: RuntimeError: ...", what srun's output file holds.
RANK_LINE = re.compile(r"^\[rank(\d{1,9})\]: ?(.*)$", re.M)


def rank_lines(agent_text: str) -> dict[int, str]:
    """Each rank's own lines in torchrun's output (its stderr relayed with torch's `[rank<R>]:` prefix), by rank."""
    out: dict[int, list[str]] = {}
    for m in RANK_LINE.finditer(agent_text or ""):
        out.setdefault(int(m.group(1)), []).append(m.group(2))
    return {rank: "\n".join(lines[-400:]) for rank, lines in out.items()}


def failure_from(record: dict, attempt: int, rank_dir: Path | None, relayed: dict[int, str] | None = None
                 ) -> RankFailure:
    """One rank's failure from a table's record: its error file, else its own stderr.log, else its lines in
    torchrun's output (``relayed``: rank_lines; a job without --redirects leaves no log of its own)."""
    err = read_error_file(Path(record["error_file"])) if record.get("error_file") not in (None, "", "<N/A>") else None
    long = tail(rank_dir / "stderr.log", 400) if rank_dir else ""  # a torch traceback is often 40+ lines
    if not long.strip() and relayed:
        long = relayed.get(record.get("rank"), "")
    log = "\n".join(long.splitlines()[-TAIL_LINES:])
    tb = (err or {}).get("traceback") or last_traceback(long)
    message = (err or {}).get("message") or (tb.strip().splitlines()[-1] if tb.strip() else None)
    etype, emsg = exception_line(message or "", tb)
    f = RankFailure(rank=record.get("rank"), local_rank=record.get("local_rank"), host=record.get("host"),
                    exit_code=record.get("exit_code"), attempt=attempt, timestamp=(err or {}).get("timestamp"),
                    error_type=etype, message=emsg if etype else message, location=user_frame(tb),
                    traceback=tb, log_tail=log)
    f = classify(f)
    if record.get("forced_kill") and f.category == "signal":
        forced_kill(f)
    return f


def forced_kill(f: RankFailure) -> None:
    """SIGKILLed by torchrun itself because it did not end on SIGTERM: no OOM, a rank that could not act on the
    launcher's stop (stopped by SIGSTOP or a debugger, frozen in D state, or a SIGTERM handler that never exits)."""
    f.victim = True
    f.message = ("killed by torchrun (SIGKILL) after it did not end on torchrun's SIGTERM within the grace period "
                 "(30 s): the process could not act on the signal")
    f.reason = "did not end on the launcher's SIGTERM, then killed by it (stopped, frozen or in D state)"
    f.fix = ("a process that ignores SIGTERM was stopped (SIGSTOP, a debugger, Ctrl-Z), frozen in the kernel (D "
             "state: `cat /proc/PID/stack`), or has a SIGTERM handler that does not exit: look at that host")


# What socket.getfqdn() returns where the hostname maps to a loopback line of /etc/hosts (Debian's default,
# many containers): torchrun's table then says "host: localhost" on every node, which names none of them.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "localhost4", "localhost4.localdomain4",
                            "localhost6", "localhost6.localdomain6", "ip6-localhost", "ip6-loopback"})


def failures_of_attempt(attempt_dir: Path, attempt: int, host: str | None, summary: list[dict] | None,
                        siblings: list[Path] = (), relayed: dict[int, str] | None = None) -> list[RankFailure]:
    """Failures of one attempt: from the agent's table when it has one, else from the error files left behind.
    ``host``: the node these logs are from (its hostname; None: not known), named instead of the table's loopback
    fqdn. ``siblings``: the same attempt's folders of the job's other nodes in one shared --log-dir, where a
    record's logs may be instead (same_job_runs)."""
    out = []
    if summary:
        for rec in summary:
            if str(rec.get("host", "")).lower() in LOOPBACK_NAMES:
                rec = dict(rec, host=host)
            out.append(failure_from(rec, attempt, rank_dir_of(rec, attempt_dir, siblings), relayed))
        return out
    for _, rank_dir in job_files.numbered(job_files.subdirs(attempt_dir)):  # `x`: skipped with a note
        err = rank_dir / "error.json"
        text = tail(rank_dir / "stderr.log", 200)
        tb = last_traceback(text)
        # no Python traceback: faulthandler's dump of a process killed by a signal, or C++'s terminate (SIGABRT)
        died = FATAL.findall(text) or (["Aborted"] if ABORT.search(text) else [])
        if err.exists() or tb or died:
            code = -FATAL_SIGNALS[died[-1]] if died and not err.exists() else 1
            rec = {"rank": global_rank_of(rank_dir), "local_rank": int(rank_dir.name), "host": host, "exit_code": code,
                   "error_file": str(err) if err.exists() else None}
            out.append(failure_from(rec, attempt, rank_dir))
    offsets = {f.rank - f.local_rank for f in out if f.rank is not None and f.local_rank is not None}
    for f in out:  # a rank whose log has no `[rankN]:` line (a C++ abort): its local rank and the node's offset
        if f.rank is None and f.local_rank is not None and len(offsets) == 1:
            f.rank = f.local_rank + next(iter(offsets))
    return out


def node_summary(attempt_dir: Path, logs: Path) -> list[dict] | None:
    """Another node's torchrun failure table, from the agent.stderr.log run-trainer keeps in that node's log dir
    (a rank SIGKILLed there leaves no trace in its own logs: only its torchrun's table says how it ended)."""
    node_dir = attempt_dir.parent.parent
    if node_dir == logs:  # a folder in the same shared torchrun --log-dir: that agent log is this node's own
        return None
    text = tail(node_dir / "agent.stderr.log", lines=2000, max_bytes=job_files.AGENT_LOG_BYTES)
    return parse_agent_summary(text) or None


def analyse(logs: Path, agent_stderr: str, host: str | None) -> Findings:
    """Every attempt's failure records as read, with what their attribution needs (AttemptRecords): attributed in
    decide() only (judge/decide.py), never here."""
    dirs = attempts(logs)
    summary = parse_agent_summary(agent_stderr)
    # closing signals to ranks the table lists (they failed too) say nothing about the ranks it does not list
    listed_pids = {rec.get("pid") for rec in summary}
    closing_signals = len({pid for pid in CLOSING_SIGNAL.findall(agent_stderr or "") if int(pid) not in listed_pids})
    verdict = Findings(root_cause=None, stopped_by=agent_signal(agent_stderr))
    siblings = same_job_runs(logs)
    if siblings:
        host = None  # several nodes' folders in one log dir: which is this machine's, none says
    for i, d in enumerate(dirs):
        last = i == len(dirs) - 1
        fails = (last_failures(logs, d, i, host, summary, siblings, rank_lines(agent_stderr)) if last
                 else failures_of_attempt(d, i, host, None))
        attribution.refine_timeouts(fails)  # each record's own words (a timeout's), as classify reads them
        if last:
            verdict.failures = list(fails)
            verdict.world = sorted({r for a in (d, *siblings) for r in attempt_ranks(a, fails)})
        if last and verdict.stopped_by:  # torchrun was stopped from outside: the stop explains every silent rank
            silent = []
        elif last and siblings:
            silent = silent_ranks([d, *siblings], fails)  # over the job's folders
        else:
            silent = ranks_without_record(d, fails, host)
        verdict.records.append(AttemptRecords(i, tuple(fails), tuple(silent), host,
                                              listed=last and tables_cover(summary, 1 + len(siblings)),
                                              closing_signals=closing_signals, last=last))
    return verdict


def last_failures(logs: Path, d: Path, i: int, host: str | None, summary: list[dict],
                  siblings: list[Path], relayed: dict[int, str]) -> list[RankFailure]:
    """The last attempt's failures: this node's (a table's records read from their own node's folder), those of the
    job's other nodes in the same log dir, and, when every one is only a consequence, the other nodes' of a shared
    run dir (the post-mortem then names the same root cause on every node), with their torchrun's table."""
    fails = failures_of_attempt(d, i, host, summary, siblings, relayed)
    for sibling in siblings:
        fails += unlisted(failures_of_attempt(sibling, i, None, None), fails)
    if fails and all(f.victim for f in fails):  # the cause is on another node
        for other_host, other in other_nodes(logs):
            if other not in siblings:
                fails += unlisted(failures_of_attempt(other, i, other_host, node_summary(other, logs)), fails)
    return fails


def tables_cover(summary: list[dict], nodes: int) -> bool:
    """torchrun's failure tables were read for every node of the job: a rank they do not list did not fail (torchrun
    lists every rank that did). One node's table says nothing of another node's silent rank (killed there)."""
    return bool(summary) and (nodes == 1 or len({rec.get("host") for rec in summary}) >= nodes)


def unlisted(found: list[RankFailure], fails: list[RankFailure]) -> list[RankFailure]:
    """The failures found of ranks ``fails`` does not hold yet (a table's record outranks a rank's own logs)."""
    listed = {f.rank for f in fails if f.rank is not None}
    return [f for f in found if f.rank is None or f.rank not in listed]


def attempt_ranks(attempt_dir: Path, fails: list[RankFailure]) -> list[int]:
    """Every global rank of an attempt: its local rank folders (torch's per-rank dirs, their env or the offset
    the failures show) and the failures' own ranks."""
    ranks = {f.rank for f in fails if f.rank is not None}
    offsets = {f.rank - f.local_rank for f in fails if f.rank is not None and f.local_rank is not None}
    for rank_dir in job_files.subdirs(attempt_dir):
        local = parse_int(rank_dir.name, hi=1 << 20)
        if local is None:
            continue  # numbered() notes it once, where the failures are read
        rank = global_rank_of(rank_dir)
        if rank is None and len(offsets) == 1:
            rank = local + next(iter(offsets))
        if rank is not None:
            ranks.add(rank)
    return sorted(ranks)
