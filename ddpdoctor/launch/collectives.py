"""Judging a job that stopped making progress, from each rank's evidence (flight recorder, stacks, process
state): match collectives across ranks by process group and sequence id, then name the culprit.

Classes, most specific first:
- ``process_stopped`` / ``process_gone``: a rank's process is stopped (SIGSTOP, D state) or gone;
- ``missing_rank``: the others wait in collective N, which these ranks never entered (their stack says where
  they are instead);
- ``desync``: ranks inside different collectives at the same sequence id, or the same op with other shapes or
  dtypes;
- ``stuck_collective``: every rank inside the same collective and none completes: the communication itself;
- ``outside_collectives``: no rank waits in a collective: every rank is stuck in its own code.
"""
from __future__ import annotations

import re
from collections import Counter

# faulthandler writes `File "f", line N in fn`; tracebacks `File "f", line N, in fn`.
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "ddpdoctor/launch/bootstrap.py")
BAD_STATES = {"stopped": "process_stopped", "disk-sleep": "process_stopped", "gone": "process_gone",
              "zombie": "process_gone"}
FIX = {
    "process_stopped": "the process is stopped (SIGSTOP, a debugger, or D state: stuck in the kernel on I/O or a "
                       "device): look at that host; `cat /proc/PID/stack` shows where a D-state process waits",
    "process_gone": "the process ended without the launcher noticing: look at that rank's log and the host's "
                    "`dmesg`",
    "missing_rank": "the culprit never reached the collective the others wait in: look at its stack (a data "
                    "loader stall, a rank-dependent branch such as `if rank == 0: dist.barrier()`, a deadlock)",
    "desync": "the ranks called different collectives (or other shapes or dtypes) at the same point: make every "
              "rank issue the same collectives in the same order with the same shapes",
    "stuck_collective": "every rank is inside the same collective and none completes: the communication itself "
                        "(link, transport, a peer's device); run `ddpdoctor preflight` and `ddpdoctor nccl-bench` "
                        "across these hosts",
    "outside_collectives": "no rank waits in a collective: every rank is stuck in its own code (see the stacks)",
    "unknown": "no flight recorder or stack answered: look at the ranks' logs",
}


# ---------------------------------------------------------------- one rank's view
def main_thread_frames(stacks: str | None) -> list[tuple[str, int, str]]:
    """(file, line, function), innermost first, of the thread that runs the script: faulthandler lists the
    dumping thread first ("Current thread", the worker server's C++ thread: no Python frame)."""
    if not stacks:
        return []
    blocks = re.split(r"\n\s*\n", stacks.strip())
    best: list[tuple[str, int, str]] = []
    for block in blocks:
        frames = [(m["file"], int(m["line"]), m["func"]) for m in FRAME.finditer(block)]
        if "<module>" in (f for _, _, f in frames) or len(frames) > len(best):
            best = frames
            if any(f == "<module>" for _, _, f in frames):
                break
    return best


def user_site(frames: list[tuple[str, int, str]], innermost_first: bool = True) -> dict | None:
    """The innermost frame of the user's own code: {"where": "file:line", "function": name}."""
    ordered = frames if innermost_first else list(reversed(frames))
    for file, line, func in ordered:
        if not any(part in file for part in LIBRARY):
            return {"where": f"{file}:{line}", "function": func}
    if ordered:
        file, line, func = ordered[0]
        return {"where": f"{file}:{line}", "function": func}
    return None


def fr_site(entry: dict | None) -> dict | None:
    """Where a flight-recorder entry was issued: its frames are outermost last, innermost first."""
    frames = [(f.get("filename", "?"), int(f.get("line", 0)), f.get("name", "?")) for f in (entry or {}).get("frames") or []]
    return user_site(frames)


def pg_views(fr: dict | None) -> dict[str, dict]:
    """Per process group, keyed by its name (the same on every rank: ``process_group[0]``): last enqueued and
    completed sequence ids and the entries by sequence id. ``pg_id`` and pg_status's keys are a rank's own
    numbering: with `new_group([0, 1])` and `new_group([2, 3])`, pg_id 1 is group "1" on rank 0 and "2" on rank 2."""
    if not fr:
        return {}
    names = {"0": "0"}
    for e in fr.get("entries") or []:
        if isinstance(e, dict) and e.get("pg_id") is not None and isinstance(e.get("process_group"), list) \
                and e["process_group"]:
            names.setdefault(str(e["pg_id"]), str(e["process_group"][0]))
    out: dict[str, dict] = {}
    for pg, status in (fr.get("pg_status") or {}).items():
        # a group of this rank's numbering no entry names (its entries rolled out of the buffer) stays apart
        out[names.get(str(pg), f"local {pg}")] = {"enqueued": _int(status.get("last_enqueued_collective")),
                                                  "completed": _int(status.get("last_completed_collective")),
                                                  "entries": {}}
    for e in fr.get("entries") or []:
        if e.get("is_p2p"):
            continue
        pid = e.get("pg_id")
        pg = (names.get(str(pid)) if pid is not None else None) or str(
            (e.get("process_group") or [pid if pid is not None else "0"])[0])
        view = out.setdefault(pg, {"enqueued": -1, "completed": -1, "entries": {}})
        seq = _int(e.get("collective_seq_id"))
        view["entries"][seq] = e
        view["enqueued"] = max(view["enqueued"], seq)
    return out


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def op_of(entry: dict | None) -> str:
    return str((entry or {}).get("profiling_name", "?")).split(":", 1)[-1]


def signature(entry: dict | None) -> tuple:
    e = entry or {}
    return (op_of(e), str(e.get("input_sizes")), str(e.get("input_dtypes")))


# ---------------------------------------------------------------- the job
def judge(evidence: dict[int, dict], expected: list[int] | None = None, source: str = "live") -> dict:
    """``evidence``: rank -> {"host", "pid", "state", "fr", "stacks"}. Returns the verdict document: the one
    judge (``launch.judge``, a wait-for graph over the ranks) on the evidence model, worded by judge.words.

    ``source`` "live": the ranks are still running (the watchdog asked them); "dumps": flight records written
    when the ranks ended, possibly after a timeout, in which gloo counts the timed-out collective as completed:
    then only the ranks' last sequence ids and their calls say who was behind. ``expected``: every rank of the
    job (from the dumps' pg_config), so that a rank that left no record is named, not forgotten."""
    from .evidence import worker_server
    from .judge import judge as judge_job
    from .judge.words import to_json

    job = worker_server.job(evidence, expected, live=source != "dumps")
    return to_json(judge_job(job), job)


# ---------------------------------------------------------------- progress of a healthy job
def summarise(frs: dict[int, dict], min_late_s: float = 0.02) -> dict:
    """Per rank, from its last flight record: collectives completed and the median time between them; and
    the straggler, a rank that enters the collectives consistently later than the others (its median
    lateness behind the first rank to enter, over the collectives every rank recorded)."""
    ranks: dict[str, dict] = {}
    created: dict[tuple, dict[int, int]] = {}
    for rank, fr in sorted(frs.items()):
        entries = [e for e in (fr or {}).get("entries") or [] if not e.get("is_p2p")]
        times = sorted(int(e.get("time_created_ns", 0)) for e in entries if e.get("time_created_ns"))
        gaps = [(b - a) / 1e9 for a, b in zip(times, times[1:])]
        ranks[str(rank)] = {"completed": _completed(fr), "interval_s_median": round(_median(gaps), 4) if gaps else None}
        for e in entries:
            key = (str((e.get("process_group") or [e.get("pg_id")])[0]), _int(e.get("collective_seq_id")))  # the name
            created.setdefault(key, {})[rank] = int(e.get("time_created_ns", 0))
    common = [by_rank for by_rank in created.values() if len(by_rank) == len(frs) > 1]
    late: dict[int, list[float]] = {r: [] for r in frs}
    for by_rank in common:
        first = min(by_rank.values())
        for r, t in by_rank.items():
            late[r].append((t - first) / 1e9)
    for r, values in late.items():
        if values:
            ranks[str(r)]["late_s_median"] = round(_median(values), 4)
    straggler = None
    medians = {r: _median(v) for r, v in late.items() if v}
    if len(medians) > 1:
        worst = max(medians, key=medians.get)
        others = _median([m for r, m in medians.items() if r != worst])
        if medians[worst] >= max(min_late_s, 3 * others):
            straggler = {"rank": worst, "late_s_median": round(medians[worst], 4), "others_s_median": round(others, 4),
                         "collectives": len(common)}
    return {"ranks": ranks, "straggler": straggler, "matched_collectives": len(common)}


def _completed(fr: dict | None) -> int | None:
    if not fr:
        return None
    vals = [_int(s.get("last_completed_collective")) for s in (fr.get("pg_status") or {}).values()]
    return sum(max(0, v) for v in vals) if vals else None


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return 0.0 if not n else s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
