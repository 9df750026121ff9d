"""The watchdog's entry to the one judge (``forensics.judge``) and the progress of a healthy job from its flight
records (collectives completed, the straggler).

``judge`` takes the watchdog's per-rank evidence ({"host", "pid", "state", "fr", "stacks"}), builds the evidence
model (``evidence.worker_server``) and returns the verdict document (``judge.words.to_json``): classes
``process_stopped``/``process_gone``, ``missing_rank``, ``missing_peer``, ``never_initialized``, ``desync``,
``stuck_collective``, ``outside_collectives``, ``unknown``; FORENSICS.md says how each is decided.
"""
from __future__ import annotations

from ..evidence.model import user_frame
from ..evidence.stacks import main_thread


def main_thread_frames(stacks: str | None) -> list[tuple[str, int, str]]:
    """(file, line, function), innermost first, of the thread that runs the script (evidence.stacks)."""
    return [(f.file, f.line, f.function) for f in main_thread(stacks)]


def user_site(frames: list[tuple[str, int, str]], innermost_first: bool = True) -> dict | None:
    """The innermost frame of the user's own code (the one rule: model.user_frame): {"where", "function"};
    the innermost frame when every frame is a library's."""
    from ..evidence.model import Frame

    ordered = [Frame(f, n, fn) for f, n, fn in (frames if innermost_first else list(reversed(frames)))]
    site = user_frame(ordered) or (ordered[0] if ordered else None)
    return site.to_json() if site else None


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


# ---------------------------------------------------------------- the job
def judge(evidence: dict[int, dict], expected: list[int] | None = None, source: str = "live") -> dict:
    """``evidence``: rank -> {"host", "pid", "state", "fr", "stacks"}. Returns the verdict document: the one
    judge (``forensics.judge``, a wait-for graph over the ranks) on the evidence model, worded by judge.words.

    ``source`` "live": the ranks are still running (the watchdog asked them); "dumps": flight records written
    when the ranks ended, possibly after a timeout, in which gloo counts the timed-out collective as completed:
    then only the ranks' last sequence ids and their calls say who was behind. ``expected``: every rank of the
    job (from the dumps' pg_config), so that a rank that left no record is named, not forgotten."""
    from ..evidence import worker_server
    from ..judge import judge as judge_job
    from ..judge.words import to_json

    job = worker_server.job(evidence, expected, live=source != "dumps")
    return to_json(judge_job(job), job)


# ---------------------------------------------------------------- progress of a healthy job
def summary_of(last_fr: dict[int, dict], run_dir) -> dict | None:
    """``summarise`` of the watchdog's last flight records, completed by those the ranks wrote at exit."""
    import json

    from ..evidence import job_files

    frs = dict(last_fr)
    for path in (run_dir / "flight_recorder").glob("rank*.json"):  # written at the ranks' exit: complete
        try:
            frs[int(path.stem[4:])] = json.loads(job_files.read_text(path))
        except (OSError, ValueError):
            continue
    return summarise(frs) if frs else None


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
