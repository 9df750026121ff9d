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

from ..grouping import rank_ranges, rank_values
from ..numbers import parse_int

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
    """``evidence``: rank -> {"host", "pid", "state", "fr", "stacks"}. Returns the verdict document.

    ``source`` "live": the ranks are still running (the watchdog asked them); "dumps": flight records written
    when the ranks ended, possibly after a timeout, in which gloo counts the timed-out collective as completed:
    then only the ranks' last sequence ids and their calls say who was behind. ``expected``: every rank of the
    job (from the dumps' pg_config), so that a rank that left no record is named, not forgotten."""
    ranks = sorted(evidence)
    sites = {r: user_site(main_thread_frames(evidence[r].get("stacks"))) for r in ranks}
    bad = [r for r in ranks if evidence[r].get("state") in BAD_STATES]
    if bad:
        cls = BAD_STATES[evidence[bad[0]]["state"]]
        return _verdict(cls, bad, evidence, sites, None,
                        f"rank(s) {_list(bad)} {evidence[bad[0]]['state']}; the others wait for them")
    views = {r: pg_views(evidence[r].get("fr")) for r in ranks}
    absent = sorted(set(expected or []) - {r for r in ranks if evidence[r].get("fr")})
    for r, v in views.items():  # every rank that answered is in the default group: no entry there, none entered
        if evidence[r].get("fr") is not None and "0" not in v:
            v["0"] = {"enqueued": -1, "completed": -1, "entries": {}}
    found = [v for v in (_judge_pg(pg, {r: v[pg] for r, v in views.items() if pg in v}, evidence, sites,
                                   dumps=source == "dumps", absent=absent)
                         for pg in sorted({pg for v in views.values() for pg in v}, key=_pg_order)) if v]
    if found:
        return _behind_the_waiters(found, evidence, sites)
    answered = [r for r in ranks if evidence[r].get("fr") is not None]
    if not answered and not any(evidence[r].get("stacks") for r in ranks):
        return _verdict("unknown", [], evidence, sites, None, "no rank's flight recorder or stack answered")
    if source == "dumps":
        # Every record ends at the same collective with the same call: records written after the job ended
        # cannot tell a rank stuck in its own code from one that timed out with the others.
        tops = sorted({v[pg]["enqueued"] for v in views.values() for pg in v})
        if absent:
            return _verdict("missing_rank", absent, evidence, sites, None,
                            f"rank(s) {_list(absent)} left no flight record; every other rank's ends at the same "
                            "collective (likely: the rank(s) without a record are the ones behind)",
                            silent=absent, likely=True)
        return _verdict("unknown", [], evidence, sites, None,
                        f"every rank's flight record ends at the same collective (#{_list(tops)}) with the same "
                        "call: the dumps do not say which rank was behind")
    # The others' collectives all completed: nobody waits in one, every rank is in its own code.
    return _verdict("outside_collectives", ranks, evidence, sites, None,
                    "no rank waits inside a collective; every rank is stuck in its own code")


def _behind_the_waiters(found: list[dict], evidence: dict, sites: dict) -> dict:
    """Several process groups: a rank missing from one group's collective may itself wait in another group's
    (rank 2 never enters the job-wide all_reduce because it waits in its pair's for rank 3). It waited: follow
    the waits to the ranks that wait in nothing; they are the culprits. A cycle (a cross-group deadlock) or no
    such rank keeps the first group's verdict."""
    first = found[0]
    if first["class"] != "missing_rank" or len(found) < 2:
        return first
    waits = {}  # rank -> the verdict of the collective it is inside, waiting for that verdict's culprits
    for v in found[1:]:
        named = {c["rank"] for c in v["culprits"]}
        for r in (v.get("collective") or {}).get("waiting_ranks") or []:
            if r not in named and named:
                waits.setdefault(r, v)
    roots, seen, todo, via = set(), set(), [c["rank"] for c in first["culprits"]], []
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        if r in waits:
            via.append(r)
            todo += [c["rank"] for c in waits[r]["culprits"]]
        else:
            roots.add(r)
    if not via or not roots or roots & set((first.get("collective") or {}).get("waiting_ranks") or []):
        return first  # nobody waited elsewhere, or the waits lead back to the first group's own waiters
    chosen = next((v for v in found if {c["rank"] for c in v["culprits"]} == roots), None)
    if chosen is None:
        chosen = _verdict(first["class"], sorted(roots), evidence, sites, first.get("collective"), first["summary"])
    coll = first.get("collective") or {}
    chosen["summary"] += (f"; rank(s) {_list(sorted(via))} waited too, inside another group's collective, so "
                          f"rank(s) {_list(coll.get('waiting_ranks') or [])} wait in {coll.get('op')} #{coll.get('seq')} "
                          f"(process group {coll.get('pg')}) behind them")
    return chosen


def _pg_order(pg: str):
    number = parse_int(pg, strip=False)
    return (0, number) if number is not None else (1, pg)


def _judge_pg(pg: str, views: dict[int, dict], evidence: dict, sites: dict, dumps: bool = False,
              absent: list[int] | None = None) -> dict | None:
    """One process group. The collective judged is the newest any rank entered (``top``): ranks whose last
    sequence id is lower never entered it (missing); ranks at ``top`` whose calls differ from the majority's
    are a desync. Live, a group where no rank waits (enqueued > completed) is not stalled; from dumps the
    sequence ids are compared whatever pg_status says (gloo marks a timed-out collective completed)."""
    waiting = [r for r, v in views.items() if v["enqueued"] > v["completed"]]
    if not waiting and not dumps:
        return None
    top = max(views[r]["enqueued"] for r in (waiting or views))
    if top < 0:
        return None
    in_top = sorted(r for r in views if views[r]["enqueued"] >= top)
    missing = sorted(r for r in views if views[r]["enqueued"] < top)
    # Ranks with no flight recorder at all (no answer) are missing evidence, not innocent; a rank that answered
    # without this group is not in it (`new_group([2, 3])` on rank 0).
    silent = sorted({r for r in evidence if r not in views and evidence[r].get("fr") is None
                     and evidence[r].get("state") == "running"} | set(absent or []))
    calls_at_top = {r: views[r]["entries"].get(top) for r in in_top if views[r]["entries"].get(top)}
    sigs = {r: signature(e) for r, e in calls_at_top.items()}
    majority = _majority(sigs)
    ref = next((calls_at_top[r] for r in sorted(calls_at_top) if majority is None or sigs[r] == majority), None)
    # Where the waiting ranks called it: the entry's frames where recorded, else their stacks (they are inside);
    # a rank making the call judged (the majority's), not an odd one (a rank-0-only barrier is not the all_reduce).
    site = fr_site(ref) or next((sites[r] for r in in_top if sites.get(r) and sigs.get(r) == signature(ref)), None) \
        or next((sites[r] for r in in_top if sites.get(r)), None)
    collective = {"pg": pg, "seq": top, "op": op_of(ref), "input_sizes": (ref or {}).get("input_sizes"),
                  "waiting_ranks": in_top, "call_site": site,
                  "ops": {str(r): op_of(e) for r, e in sorted(calls_at_top.items())}}
    if missing:
        return _missing_verdict(pg, top, views, missing, in_top, collective, evidence, sites, silent, dumps)
    if len(set(sigs.values())) > 1:
        return _desync_verdict(pg, top, views, sigs, calls_at_top, majority, collective, evidence, sites, silent)
    if silent:
        return _verdict("missing_rank", silent, evidence, sites, collective,
                        f"rank(s) {_list(in_top)} {'entered' if dumps else 'wait in'} {collective['op']} #{top}; "
                        f"rank(s) {_list(silent)} {'left no flight record' if dumps else 'did not answer (no flight recorder)'}",
                        silent=silent, likely=dumps)
    if dumps and not waiting:
        return None  # records of a job that ended with every rank past the same collective: nothing differs
    hosts = sorted({str(evidence[r].get("host")) for r in in_top})
    return _verdict("stuck_collective", in_top, evidence, sites, collective,
                    f"every rank is inside {collective['op']} #{top} (process group {pg}) and none completes; "
                    f"hosts: {', '.join(hosts)}")


def _missing_verdict(pg: str, top: int, views: dict[int, dict], missing: list[int], in_top: list[int],
                     collective: dict, evidence: dict, sites: dict, silent: list[int], dumps: bool) -> dict:
    """Ranks whose last sequence id is below ``top`` never entered the collective the others are in."""
    behind = {str(r): views[r]["enqueued"] for r in missing}
    collective["last_seq"] = {**behind, **{str(r): top for r in in_top}}
    for r in missing:  # where a rank known only from its record was last seen: its last collective's call
        last = views[r]["entries"].get(views[r]["enqueued"])
        if last is not None:
            collective.setdefault("last_calls", {})[str(r)] = {
                "seq": views[r]["enqueued"], "op": op_of(last), **(fr_site(last) or {})}
    return _verdict("missing_rank", missing, evidence, sites, collective,
                    f"rank(s) {_list(missing)} never entered {collective['op']} #{top} (process group {pg}) "
                    f"that rank(s) {_list(in_top)} " + ("entered (last sequence ids: " + rank_values(collective["last_seq"])
                                                        + ")" if dumps else "wait in"), silent=silent)


def _desync_verdict(pg: str, top: int, views: dict[int, dict], sigs: dict, calls_at_top: dict, majority,
                    collective: dict, evidence: dict, sites: dict, silent: list[int]) -> dict:
    """The ranks at ``top`` called different collectives (op, sizes or dtypes): the minority, or no one."""
    calls = {str(r): {"op": sigs[r][0], "input_sizes": sigs[r][1], "input_dtypes": sigs[r][2],
                      **(fr_site(calls_at_top[r]) or sites.get(r) or {})} for r in sorted(sigs)}
    collective["calls"] = calls
    what = "; ".join(f"rank {r}: {c['op']} {c['input_sizes']} {c['input_dtypes']}"
                     + (f" at {c['where']}" if c.get("where") else "") for r, c in calls.items())
    if majority is not None:
        odd = sorted(r for r, s in sigs.items() if s != majority)
        why = (f"rank(s) {_list(odd)} differ from the {sum(1 for s in sigs.values() if s == majority)} "
               f"rank(s) that agree ({majority[0]} {majority[1]} {majority[2]})")
        return _verdict("desync", odd, evidence, sites, collective,
                        f"collective #{top} (process group {pg}) differs across ranks: {why}; {what}",
                        silent=silent)
    # No majority (two ranks, or two equal camps): the call new to this job is odd (a rank-guarded
    # `dist.barrier()`); else no rank is named rather than one picked by its order.
    odd = _new_calls(top, sigs, views)
    why = (f"no majority among {len(sigs)} rank(s); the call of rank(s) {_list(odd)} appears nowhere earlier in "
           "the job" if odd else f"no majority among {len(sigs)} rank(s): either side may be the wrong one")
    out = _verdict("desync", odd, evidence, sites, collective,
                   f"collective #{top} (process group {pg}) differs across ranks ({why}): {what}", silent=silent)
    out["no_majority"] = True
    return out


def _majority(sigs: dict[int, tuple]) -> tuple | None:
    """The call more ranks made than any other, if one did (a strict plurality); None on a tie."""
    counts = Counter(sigs.values()).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def _new_calls(top: int, sigs: dict[int, tuple], views: dict[int, dict]) -> list[int]:
    """Ranks whose call at ``top`` (op and call site) appears nowhere earlier in any rank's flight recorder: a
    rank-guarded `dist.barrier()` is new; the all_reduce the other rank is in ran at every step before."""
    def key(entry):
        return op_of(entry), (fr_site(entry) or {}).get("where")

    earlier = {key(e) for v in views.values() for seq, e in v["entries"].items() if seq < top}
    new = sorted(r for r in sigs if key(views[r]["entries"].get(top)) not in earlier)
    return new if 0 < len(new) < len(sigs) else []


def _verdict(cls: str, culprits: list[int], evidence: dict, sites: dict, collective: dict | None, summary: str,
             silent: list[int] | None = None, likely: bool = False) -> dict:
    ops = (collective or {}).get("ops") or {}
    waited_in = (lambda r: f"{ops[str(r)]} #{collective['seq']}" if str(r) in ops else None)
    last_calls = (collective or {}).get("last_calls") or {}
    who = [_who(r, evidence, sites) for r in culprits]
    calls = (collective or {}).get("calls") or {}
    for c in who:  # no stack (dumps only): where it was last seen, its last collective's call site
        seen = last_calls.get(str(c["rank"]))
        if not c["where"] and (calls.get(str(c["rank"])) or {}).get("where"):
            c.update(where=calls[str(c["rank"])]["where"], function=calls[str(c["rank"])].get("function"))
        if not c["where"] and seen and seen.get("where"):
            c.update(where=seen["where"], function=seen.get("function"),
                     last_seen=f"{seen['op']} #{seen['seq']}, its last collective")
    out = {"class": cls, "summary": summary, "fix": FIX[cls], "collective": collective, "culprits": who,
           "consequences": [dict(_who(r, evidence, sites), reason="waited for the culprit(s)", waited_in=waited_in(r))
                            for r in sorted(evidence) if r not in culprits],
           "call_sites": {str(r): sites[r] for r in sorted(evidence) if sites.get(r)}}
    if silent:
        out["no_evidence"] = silent
    if likely:
        out["likely"] = True
    return out


def _who(rank: int, evidence: dict, sites: dict) -> dict:
    ev = evidence.get(rank) or {}
    site = sites.get(rank) or {}
    return {"rank": rank, "host": ev.get("host"), "node": ev.get("node"), "pid": ev.get("pid"), "state": ev.get("state"),
            "where": site.get("where"), "function": site.get("function")}


def _list(ranks) -> str:
    return rank_ranges(ranks)  # "3-65535", not 65,533 numbers


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
