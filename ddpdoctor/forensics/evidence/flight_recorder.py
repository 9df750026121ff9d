"""torch's flight recorder -> RankState: gloo's JSON (`_dump_fr_trace_json`, the worker server's
`fr_trace_json`, run-trainer's dumps) and NCCL-shaped dumps (pickled `nccl_trace_rank_<R>`, the same fields
plus `state`, `p2p_seq_id`, `frames` with call sites). The dict comes from ``fr_dumps.plain_record`` (typed,
bounded) or the worker server; only its fields are read here.

A collective is completed when its sequence id is at or below its group's ``last_completed_collective``
(pg_status, keyed by the rank's own pg_id) or its entry says ``state: completed``. Live, a rank with a
collective entered but not completed waits in it. NCCL records point-to-point ops (``is_p2p``, with the
peer in ``input``/``output`` ranks where torch gives them); gloo on torch 2.13 records none.
"""
from __future__ import annotations

import json
import re

from ...numbers import parse_int
from .model import Call, Ender, Ending, EndKind, Frame, Group, RankState, Source, Wait, WaitKind, user_frame


def _int(v, lo: int = -1) -> int | None:
    return parse_int(v, lo=lo, hi=1 << 62, signed=lo < 0) if not isinstance(v, float) else None


def _sizes(v) -> tuple:
    if not isinstance(v, (list, tuple)):
        return ()
    return tuple(_sizes(x) if isinstance(x, (list, tuple)) else x for x in v)


def groups_of(fr: dict) -> tuple[dict[str, Group], tuple[Group, ...]]:
    """(pg_id -> Group as this rank numbers them, every group it belongs to). Names from the entries'
    ``process_group`` (and pg_config where it is keyed by name), members from pg_config's ``ranks``."""
    config = fr.get("pg_config") if isinstance(fr.get("pg_config"), dict) else {}
    by_name: dict[str, tuple[int, ...] | None] = {}
    for key, cfg in config.items():
        if not isinstance(cfg, dict):
            continue
        ranks = cfg.get("ranks")
        try:
            ranks = json.loads(ranks) if isinstance(ranks, str) and len(ranks) < 1 << 20 else ranks
        except ValueError:
            ranks = None
        ok = isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks)
        by_name[str(cfg.get("name", key))] = tuple(ranks) if ok else None
    if "0" not in by_name and "" in by_name:  # gloo on torch 2.13 keys the default group's config "" (name "")
        by_name["0"] = by_name[""]
    local: dict[str, Group] = {"0": Group("0", by_name.get("0"), "0", "default_pg")}
    for e in fr.get("entries") or []:
        pg, pid = e.get("process_group"), e.get("pg_id")
        if pid is None or not isinstance(pg, (list, tuple)) or not pg:
            continue
        name = str(pg[0])
        local.setdefault(str(pid), Group(name, by_name.get(name), str(pid), str(pg[1]) if len(pg) > 1 else None))
    return local, tuple({g.key: g for g in local.values()}.values())


def _site(e: dict) -> Frame | None:
    frames = []
    for f in e.get("frames") or []:
        line = _int(f.get("line", 0), lo=0)
        if line is not None:
            frames.append(Frame(str(f.get("filename", "?")), line, str(f.get("name", "?"))))
    return user_frame(frames)


def status_numbers(fr: dict) -> dict[str, str]:
    """pg_id -> the entry field its pg_status' ``last_*_collective`` counts. NCCL counts collectives
    (``collective_seq_id``); gloo on torch 2.13-2.15 counts every op it recorded or not, send/recv included
    (``op_id``: its last_enqueued is the newest entry's op_id, seen in the real dumps of tests/unit/forensics/data):
    read as collective ids, a collective after a few sends would look completed while it is pending."""
    newest: dict[str, tuple[int, int]] = {}
    gloo: set[str] = set()
    for e in fr.get("entries") or []:
        pid, seq, op = str(e.get("pg_id")), _int(e.get("collective_seq_id")), _int(e.get("op_id"))
        if e.get("is_p2p") or seq is None or op is None:
            continue
        old = newest.get(pid, (-1, -1))
        newest[pid] = (max(old[0], seq), max(old[1], op))
        if str(e.get("profiling_name", "")).startswith("gloo:"):
            gloo.add(pid)
    out = {}
    for pid, status in (fr.get("pg_status") or {}).items():
        enq = _int((status or {}).get("last_enqueued_collective"))
        seq, op = newest.get(str(pid), (-1, -1))
        if str(pid) in gloo or (enq is not None and op != seq and enq == op):
            out[str(pid)] = "op_id"
    return out


def calls_of(fr: dict) -> tuple[Call, ...]:
    """Every entry as a Call, oldest first, with its group resolved from this rank's own pg_id. A p2p entry
    (``nccl:send 0->1``, ``nccl:recv 1<-0``, torch 2.15's any-source ``recv 1<-?``, the ops of a
    batch_isend_irecv, which NCCL records as entries of one coalesced group ended by ``nccl:coalesced``) keeps
    its peer as a global rank (the names give group ranks); ``state`` says completed, started (its kernel runs)
    or scheduled (enqueued, never started)."""
    local, _ = groups_of(fr)
    numbers = status_numbers(fr)
    done = {str(k): _int((v or {}).get("last_completed_collective")) for k, v in (fr.get("pg_status") or {}).items()}
    out = []
    for e in fr.get("entries") or []:
        pid = e.get("pg_id")
        pg = e.get("process_group")
        group = local.get(str(pid)) if pid is not None else None
        if group is None:
            group = Group(str(pg[0]) if isinstance(pg, (list, tuple)) and pg else "0")
        p2p = bool(e.get("is_p2p"))
        seq = _int(e.get("p2p_seq_id" if p2p else "collective_seq_id"))
        counted = _int(e.get(numbers.get(str(pid), "collective_seq_id"))) if not p2p else None
        last_done = done.get(str(pid) if pid is not None else group.name)
        state = e.get("state") if e.get("state") in STATES else None
        completed = (state == "completed") or (not p2p and counted is not None and last_done is not None
                                               and last_done >= 0 and counted <= last_done)
        op, peer = p2p_of(str(e.get("profiling_name", "?")), group)
        out.append(Call(group, op, None if p2p else seq, peer=peer, input_sizes=_sizes(e.get("input_sizes")),
                        output_sizes=_sizes(e.get("output_sizes")),
                        dtypes=tuple(str(d) for d in e.get("input_dtypes") or ()), completed=completed, site=_site(e),
                        created_ns=_int(e.get("time_created_ns"), lo=0), timeout_ms=_int(e.get("timeout_ms"), lo=0),
                        state=None if completed and state != "completed" else state))
    return tuple(out)


STATES = ("completed", "started", "scheduled")
# "send 0->1" (group ranks src->dst), "recv 1<-0" (dst<-src), "recv 1<-?" (any source, torch 2.15)
P2P_NAME = re.compile(r"^(?P<op>send|recv) (?:(?P<src>\d{1,7})->(?P<dst>\d{1,7})|(?P<to>\d{1,7})<-(?P<from>\d{1,7}|\?))$")


def p2p_of(profiling_name: str, group: Group) -> tuple[str, int | None]:
    """(op, peer as a global rank or None) from an entry's name: "nccl2:all_reduce" -> ("all_reduce", None),
    "nccl:send 0->1" -> ("send", global rank of group rank 1), "nccl:recv 1<-?" -> ("recv", None)."""
    name = profiling_name.split(":", 1)[-1].strip()
    m = P2P_NAME.match(name)
    if not m:
        return name, None
    if m["op"] == "send":
        local = m["dst"]
    else:
        local = m["from"] if m["to"] is not None else m["src"]
    if local is None or local == "?":
        return m["op"], None
    members = sorted(group.ranks) if group.ranks else None
    k = int(local)
    if members is None:
        return m["op"], k  # the default group, no config: group ranks are the global ones
    return m["op"], members[k] if k < len(members) else None


def p2p_wait(fr: dict, calls: tuple[Call, ...]) -> Wait | None:
    """The send/recv a rank's record shows it blocked in: its oldest p2p entry the backend says is not completed
    (NCCL keeps ``state`` for p2p as for collectives, live and in a dump written on its timeout; gloo records no
    p2p). Of a batch (batch_isend_irecv: entries of one ``p2p_seq_id``, NCCL's coalesced group), its receive from
    a named peer is the wait: a send of the batch may have gone while the data it waits for has not come.
    ``calls`` are ``calls_of(fr)``: one per entry, in the entries' order."""
    entries = [e for e in fr.get("entries") or []]
    pending = [(c, _int(e.get("p2p_seq_id"))) for c, e in zip(calls, entries)
               if c.op in ("send", "recv") and c.state in ("started", "scheduled")]
    if not pending:
        return None
    first, batch_id = pending[0]
    batch = [c for c, b in pending if b is not None and b == batch_id] or [first]
    call = next((c for c in batch if c.op == "recv" and c.peer is not None), first)
    kind = WaitKind.P2P if len(batch) > 1 else WaitKind.RECV if call.op == "recv" else WaitKind.SEND
    return Wait(kind, call=call, peer=call.peer, site=call.site)


def rank_state(rank: int, fr: dict | None, source: Source = Source.FLIGHT_RECORDER, live: bool = False) -> RankState:
    """One rank's record. ``live``: asked of a running rank: a collective entered and not completed is its wait.
    The bootstrap's ``ended`` note (the script ended of its own) becomes the ending."""
    if fr is None:
        return RankState(rank, source)
    calls = calls_of(fr)
    _, groups = groups_of(fr)
    wait = None
    if live:
        pending = [c for c in calls if c.seq is not None and not c.completed]
        wait = Wait(WaitKind.COLLECTIVE, call=pending[0], site=pending[0].site) if pending else None
    if wait is None:
        wait = p2p_wait(fr, calls)
    ending = None
    ended = fr.get("ended")
    if isinstance(ended, dict) and _int(ended.get("exit_code")) is not None:
        where = ended.get("where") if isinstance(ended.get("where"), str) else None
        file, _, line = (where or "").rpartition(":")
        frame = Frame(file, _int(line, lo=0) or 0, "?") if file else None
        ending = Ending(EndKind.EXITED, exit_code=_int(ended["exit_code"]), by=Ender.ITSELF, where=frame)
    return RankState(rank, source, calls=calls, groups=groups, recorded=True, wait=wait, ending=ending,
                     raw={"fr": fr})
