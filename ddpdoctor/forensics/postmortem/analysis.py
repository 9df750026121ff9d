"""Post-mortem of a torchrun job: which rank failed first, on which host, why, and what to do.

Three parts: reading torch's records (here, through ``evidence_io``'s bounded reads), classifying each
rank's failure (``classify``: the rules, exception parsing) and attributing (``attribution``: the root cause
versus its consequences, the ranks that never failed but were waited for).

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
from ..judge.verdict import Findings
from ..judge.classify import (ABORT, classify, exception_line, last_traceback,
                              user_frame)

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
# job): "SignalException: Process 16082 got signal: 15", or its "Received Signals.SIGTERM death signal" line.
AGENT_SIGNALLED = re.compile(r"SignalException: Process \d{1,9} got signal: (\d{1,2})|Received Signals\.(SIG[A-Z]{2,6}) death "
                             r"signal")


def agent_signal(text: str) -> str | None:
    """The signal torchrun received from outside, named (SIGTERM), from its own output; None if it got none."""
    import signal

    for m in AGENT_SIGNALLED.finditer(text or ""):
        if m.group(2):
            return m.group(2)
        try:
            return signal.Signals(int(m.group(1))).name
        except ValueError:
            continue
    return None


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


def tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = job_files.STDERR_TAIL_BYTES) -> str:
    """The last lines of a log, reading at most its last ``max_bytes`` (a rank's log can be gigabytes). torch's
    `[rankN]:` prefix is cut from the lines kept only (over a whole 512 KiB tail, 10,000 ranks' logs spent most
    of a postmortem's time in that one substitution)."""
    kept = job_files.read_tail(path, max_bytes).splitlines()[-lines:]
    return "\n".join(RANK_PREFIX.sub("", line, count=1) for line in kept)


RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]: ?", re.M)  # torch prefixes every worker line with its rank


def failure_from(record: dict, attempt: int, rank_dir: Path | None) -> RankFailure:
    err = read_error_file(Path(record["error_file"])) if record.get("error_file") not in (None, "", "<N/A>") else None
    long = tail(rank_dir / "stderr.log", 400) if rank_dir else ""  # a torch traceback is often 40+ lines
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


def attempts(logs: Path) -> list[Path]:
    """torchrun writes <log_dir>/<run id>_<random>/attempt_<k>/<local_rank>/; newest run first (a folder
    that is not attempt_<number>, such as attempt_final, is skipped with a note)."""
    runs = sorted(job_files.subdirs(logs), key=job_files.mtime)
    if not runs:
        return []
    tries = [d for d in job_files.subdirs(runs[-1]) if d.name.startswith("attempt_")]
    return [d for _, d in job_files.numbered(tries, "attempt_")]


# What socket.getfqdn() returns where the hostname maps to a loopback line of /etc/hosts (Debian's default,
# many containers): torchrun's table then says "host: localhost" on every node, which names none of them.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "localhost4", "localhost4.localdomain4",
                            "localhost6", "localhost6.localdomain6", "ip6-localhost", "ip6-loopback"})


def failures_of_attempt(attempt_dir: Path, attempt: int, host: str, summary: list[dict] | None) -> list[RankFailure]:
    """Failures of one attempt: from the agent's table when it has one, else from the error files left behind.
    ``host``: the node these logs are from (its hostname), named instead of the table's loopback fqdn."""
    out = []
    if summary:
        for rec in summary:
            if str(rec.get("host", "")).lower() in LOOPBACK_NAMES:
                rec = dict(rec, host=host)
            out.append(failure_from(rec, attempt, attempt_dir / str(rec["local_rank"])))
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


def other_nodes(logs: Path) -> list[tuple[str, Path]]:
    """With a shared --run-dir every node's logs sit side by side: (host, latest attempt dir) of the others."""
    out = []
    for node_dir in sorted(p for p in job_files.subdirs(logs.parent) if p != logs):
        tries = attempts(node_dir)
        if tries:
            out.append((node_dir.name.rsplit("-", 2)[0], tries[-1]))  # <host>-<addr>-<pid>
    return out



def analyse(logs: Path, agent_stderr: str, host: str) -> Findings:
    dirs = attempts(logs)
    summary = parse_agent_summary(agent_stderr)
    # closing signals to ranks the table lists (they failed too) say nothing about the ranks it does not list
    listed_pids = {rec.get("pid") for rec in summary}
    closing_signals = len({pid for pid in CLOSING_SIGNAL.findall(agent_stderr or "") if int(pid) not in listed_pids})
    verdict = Findings(root_cause=None, stopped_by=agent_signal(agent_stderr))
    for i, d in enumerate(dirs):
        last = i == len(dirs) - 1
        fails = failures_of_attempt(d, i, host, summary if last else None)
        if last and fails and all(f.victim for f in fails):
            # Every local rank is a consequence: the cause is on another node. Read its records when the
            # run dir is shared (the post-mortem then names the same root cause on every node).
            for other_host, other in other_nodes(logs):
                fails += failures_of_attempt(other, i, other_host, None)
        attribution.refine_timeouts(fails)
        if last:
            verdict.failures, verdict.world = list(fails), attempt_ranks(d, fails)
        root, rest = attribution.blame_the_absent(*attribution.judge(fails), d, host, listed=bool(summary) and last,
                                                  closing_signals=closing_signals)
        verdict.attempts.append({"attempt": i, "root_cause": root.to_json() if root else None,
                                 "consequences": [f.to_json() for f in rest]})
        if last:
            verdict.root_cause, verdict.consequences = root, rest
    return verdict


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
