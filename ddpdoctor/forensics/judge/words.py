"""The verdict worded: run.json's ``hang.verdict`` document (every field SCHEMA.md and FORENSICS.md name:
class, summary, fix, collective, culprits, consequences, call_sites, no_evidence, likely, no_majority) plus the
typed fields beside them (category, named, no_culprit, mismatch, via, waits). Decided before; worded here."""
from __future__ import annotations

from ...grouping import rank_ranges, rank_values
from ..evidence.model import Call, JobEvidence, WaitKind, user_frame
from . import streams
from .verdict import Category, Consequence, Culprit, NoCulprit, Verdict

FIX = {
    Category.PROCESS_STOPPED: "the process is stopped (SIGSTOP, a debugger, or D state: stuck in the kernel on I/O or "
                              "a device): look at that host; `cat /proc/PID/stack` shows where a D-state process waits",
    Category.PROCESS_GONE: "the process ended without the launcher noticing: look at that rank's log and the host's "
                           "`dmesg`",
    Category.MISSING_RANK: "the culprit never reached the collective the others wait in: look at its stack (a data "
                           "loader stall, a rank-dependent branch such as `if rank == 0: dist.barrier()`, a deadlock)",
    Category.MISSING_PEER: "the culprit never reached the send/recv its peer waits in: look at its stack (a stage "
                           "stuck in its own compute, a schedule where both ends receive first)",
    Category.NEVER_INITIALIZED: "the culprit never reached init_process_group, where the others wait for it: look at "
                                "what it does before (imports, data preparation, a rank-dependent branch)",
    Category.DESYNC: "the ranks called different collectives (or other shapes, dtypes or splits) at the same point: "
                     "make every rank issue the same collectives in the same order with the same shapes",
    Category.STUCK_COLLECTIVE: "every rank is inside the same collective and none completes: the communication itself "
                               "(link, transport, a peer's device); run `ddpdoctor preflight` and `ddpdoctor "
                               "nccl-bench` across these hosts",
    Category.STUCK_INIT: "every rank reached init_process_group and none is missing, but the rendezvous never "
                         "completes: check that MASTER_ADDR:MASTER_PORT is the same store for all and reachable from "
                         "every node (`ddpdoctor preflight`); after a restart this is torch's own (its restarted "
                         "ranks could not meet again): rerun the job",
    Category.ENDED_EARLY: "every rank must issue the same collectives: a rank that returns or calls sys.exit early (a "
                          "shorter data loop, a rank-dependent `if`/`break`) leaves the others waiting in their next "
                          "one; give every rank the same number of steps",
    Category.KILLED: "the rank was killed by a signal nobody in the job sent (the OOM killer, an operator, the "
                     "scheduler): check `dmesg | grep -i -e oom -e killed` and the job's memory limit",
    Category.EXCEPTION: "the rank ended on its own exception: correct the code there",
    Category.OUTSIDE_COLLECTIVES: "no rank waits in a collective: every rank is stuck in its own code (see the stacks)",
    Category.UNKNOWN: "no flight recorder or stack answered: look at the ranks' logs",
}
LEGACY_CLASS = {Category.ENDED_EARLY: "missing_rank", Category.KILLED: "missing_rank", Category.EXCEPTION: "missing_rank"}
NO_CULPRIT = {NoCulprit.CYCLE: "the waits go round in a circle (each rank waits for another that waits): a deadlock "
                               "between groups or a send/recv schedule, no single rank to name",
              NoCulprit.TIE: "no majority: either side may be the wrong one",
              NoCulprit.NO_EVIDENCE: "the waits lead to ranks no record places",
              NoCulprit.EVERYONE: "every rank stands at the same place"}


def _ranks(ranks) -> str:
    return rank_ranges(list(ranks))  # "3-65535", not 65,533 numbers


def _call(c: Call | None) -> str:
    if c is None:
        return "a collective"
    if c.numbered:
        return f"{c.op} #{c.seq}"
    return f"{c.op}" + (f" (peer rank {c.peer})" if c.peer is not None else "")


def library_phrase(ranks, evidence: JobEvidence, call: Call | None = None) -> str | None:
    """The library wait the waiting ranks stand in ("DDP's gradient all_reduce inside loss.backward()"), when
    their stacks say: the first waiting rank's (evidence.library_waits decided it; this only words it). Never one
    whose collective is not the ``call`` the records show them in (a subgroup's all_gather inside backward is not
    DDP's gradient all_reduce, which the autograd engine's frames alone would suggest)."""
    for r in ranks:
        s = evidence.ranks.get(r)
        if s is not None and s.wait is not None and s.wait.library is not None and _agrees(s.wait.library.op, call):
            return s.wait.library.said
    return None


GENERIC_OPS = ("", "wait", "wait_tensor", "redistribute")  # library rows that name no collective of their own


def _agrees(library_op: str, call: Call | None) -> bool:
    if call is None or library_op in GENERIC_OPS or not call.op:
        return True
    def norm(op: str) -> str:
        return "".join(ch for ch in op.lower() if ch.isalpha())
    return norm(library_op) in norm(call.op)


def _in(c: Call | None, v: Verdict, evidence: JobEvidence) -> str:
    """What the waiting ranks wait in: the library's wait with the call ("DDP's gradient all_reduce inside
    loss.backward() (all_reduce #7)"), else the call."""
    phrase = library_phrase(v.waiting, evidence, c)
    if phrase and c is not None and (c.numbered or c.peer is not None):
        return f"{phrase} ({_call(c)})"
    return phrase or _call(c)


def _who(rank: int, evidence: JobEvidence, where=None) -> dict:
    s = evidence.ranks.get(rank)
    frame = where if where is not None else (user_frame(s.frames) if s else None)
    return {"rank": rank, "host": s.host if s else None, "node": s.node if s else None, "pid": s.pid if s else None,
            "state": (s.raw.get("state") if s else None), "where": frame.where if frame else None,
            "function": frame.function if frame else None}


def culprit_json(c: Culprit, evidence: JobEvidence) -> dict:
    out = _who(c.rank, evidence, c.where)
    if out["where"] is None and c.last_seen is not None and c.last_seen.site is not None:
        # where its record last saw it: its last collective, which it completed; not where it stands (no stack
        # says that), so not its location
        out.update(last_seen=f"{_call(c.last_seen)}, its last collective", last_seen_where=c.last_seen.site.where)
    if c.ended:
        out["ended"] = c.ended
    if c.rank in evidence.unread:
        out["state"] = "not read"  # never read (another node's rank): not one that never entered the collective
    return out


def _consequence(c: Consequence, v: Verdict, evidence: JobEvidence) -> dict:
    waited = _call(c.call) if c.call is not None else (_call(v.calls.get(c.rank)) if c.rank in v.calls else None)
    if c.call is None and c.rank in v.waiting and v.call is not None and c.rank not in v.calls:
        waited = _call(v.call)
    out = dict(_who(c.rank, evidence, c.where), reason="waited for the culprit(s)", waited_in=waited)
    out["wait"] = {"kind": c.kind.value, "for": list(c.waited_for)}
    if c.aborted:
        out["aborted"] = True
    return out


def collective(v: Verdict, evidence: JobEvidence) -> dict | None:
    """The collective (or send/recv, or init) the others wait in, as run.json's ``collective`` has it."""
    c = v.call
    if c is None:
        return None
    site = c.site or next((user_frame(evidence.ranks[r].frames) for r in v.waiting if r in evidence.ranks
                           and (r not in v.calls or v.calls[r].signature() == c.signature())
                           and user_frame(evidence.ranks[r].frames)), None)
    out = {"pg": c.group.name, "seq": c.seq if c.numbered else None, "op": c.op, "input_sizes": _plain(c.input_sizes),
           "waiting_ranks": list(v.waiting), "call_site": site.to_json() if site else None,
           "ops": {str(r): x.op for r, x in sorted(v.calls.items())}}
    if c.peer is not None:
        out["peer"] = c.peer
    phrase = library_phrase(v.waiting, evidence, c)
    if phrase:
        out["library"] = phrase
    if v.last_seq and any(s < (c.seq or 0) for s in v.last_seq.values()):
        out["last_seq"] = {str(r): s for r, s in sorted(v.last_seq.items())}
    if v.category == Category.DESYNC:
        out["calls"] = {str(r): {"op": x.op, "input_sizes": str(_plain(x.input_sizes)), "input_dtypes": str(list(x.dtypes)),
                                 **((x.site or _site_of(r, evidence)).to_json() if (x.site or _site_of(r, evidence)) else {})}
                        for r, x in sorted(v.calls.items())}
    return out


def call_site(v: Verdict, rank: int, evidence: JobEvidence) -> str | None:
    """A mismatch: the file:line of the rank's own call (its record's, else its stack's)."""
    call = v.calls.get(rank)
    site = (call.site if call is not None else None) or _site_of(rank, evidence)
    return site.where if site is not None else None


def _site_of(rank: int, evidence: JobEvidence):
    s = evidence.ranks.get(rank)
    return user_frame(s.frames) if s else None


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


def summary(v: Verdict, evidence: JobEvidence) -> str:
    c, names = v.call, _ranks(v.culprit_ranks)
    pg = f" (process group {c.group.name})" if c is not None and c.numbered else ""
    if v.category in (Category.PROCESS_STOPPED, Category.PROCESS_GONE):
        state = v.culprits[0].state or v.category.value.split("_")[1]
        return f"rank(s) {names} {state}; the others wait for them"
    if v.category == Category.DESYNC:
        return _desync(v, names, pg)
    if v.category == Category.STUCK_COLLECTIVE and streams.TAG in v.evidence:
        return streams.summary(v, names, _ranks(v.waiting), _call(c), pg)
    if v.category == Category.STUCK_COLLECTIVE:
        hosts = sorted({str(evidence.ranks[r].host) for r in v.waiting if r in evidence.ranks})
        return (f"every rank is inside {_call(c)}{pg} and none completes; hosts: {', '.join(hosts)}")
    if v.category == Category.STUCK_INIT:
        return (f"every rank ({_ranks(v.waiting)}) is inside init_process_group and none is missing; the "
                "rendezvous never completes")
    if v.no_culprit is not None:
        return f"no culprit named: {NO_CULPRIT[v.no_culprit]} (ranks waiting: {_ranks(v.waiting)})"
    if v.category == Category.OUTSIDE_COLLECTIVES:
        return "no rank waits inside a collective; every rank is stuck in its own code"
    return _missing(v, names, pg, evidence)


from .sizes import REASONS as SIZE_REASONS  # noqa: E402 - the size judge words its own rules


def _desync(v: Verdict, names: str, pg: str) -> str:
    c = v.call
    what = "; ".join(f"rank {r}: {x.op} {_plain(x.input_sizes)} {list(x.dtypes)}"
                     + (f" at {x.site.where}" if x.site else "") for r, x in sorted(v.calls.items()))
    head = f"collective #{c.seq}{pg}" if c is not None and c.numbered else _call(c)
    if "majority" in v.evidence or "p2p_majority" in v.evidence:
        agree = [r for r in v.calls if r not in v.culprit_ranks]
        return (f"{head} differs across ranks ({v.mismatch}): rank(s) {names} differ from the {len(agree)} rank(s) "
                f"that agree ({c.op} {_plain(c.input_sizes)} {list(c.dtypes)}); {what}")
    said = next((SIZE_REASONS[t] for t in v.evidence if t in SIZE_REASONS), None)  # judge/sizes' own rules
    if said is not None:
        return f"{head} differs across ranks ({v.mismatch}; {said.format(names=names)}): {what}"
    why = (f"no majority among {len(v.calls)} rank(s); the call of rank(s) {names} appears nowhere earlier in the "
           "job" if v.culprits else f"no majority among {len(v.calls)} rank(s): either side may be the wrong one")
    return f"{head} differs across ranks ({v.mismatch}; {why}): {what}"


def _missing(v: Verdict, names: str, pg: str, evidence: JobEvidence) -> str:
    c = v.call
    verb = "wait in" if evidence.live else "entered"
    if v.category == Category.NEVER_INITIALIZED:
        text = f"rank(s) {names} never reached init_process_group, where rank(s) {_ranks(v.waiting)} wait for them"
    elif v.category == Category.MISSING_PEER:
        text = f"rank(s) {names} never reached the {_in(c, v, evidence)} that rank(s) {_ranks(v.waiting)} {verb}"
    elif c is None:
        text = f"rank(s) {names} left no record; the others wait"
    elif set(v.culprit_ranks) <= set(evidence.unread):
        return _unread(v, pg, evidence)
    else:
        read = [r for r in v.culprit_ranks if r not in evidence.unread]
        text = f"rank(s) {_ranks(read)} never entered {_in(c, v, evidence)}{pg} that rank(s) {_ranks(v.waiting)} {verb}"
        if not evidence.live and v.last_seq:
            text += " (last sequence ids: " + rank_values(v.last_seq) + ")"
        if len(read) < len(v.culprit_ranks):
            text += f"; rank(s) {_ranks(not_read(v, evidence))} {UNREAD}"
    silent = [r for r in v.no_evidence if r not in evidence.unread]
    if silent:
        text += f"; rank(s) {_ranks(silent)} " + ("left no flight record" if not evidence.live
                                                  else "did not answer (no flight recorder)")
    ended = [c for c in v.culprits if c.ended]
    if ended:
        text += "; " + ", ".join(f"rank {c.rank} ended of its own (exit code {c.ended['exit_code']})" for c in ended)
    if v.via:
        text += f"; rank(s) {_ranks(v.via)} waited too, inside another wait, so rank(s) behind them wait"
        first = next((x for x in v.consequences if x.rank not in v.via and x.call is not None), None)
        if first is not None and first.call is not None:
            text += f" in {_call(first.call)} (process group {first.call.group.name})"
    return text


UNREAD = "not read (no process of theirs was read: another node's, or one that could not be read)"


def not_read(v: Verdict, evidence: JobEvidence) -> list[int]:
    """The culprits nothing was read of (JobEvidence.unread): the others wait for them, where they are is not known."""
    return [r for r in v.culprit_ranks if r in evidence.unread]


def _unread(v: Verdict, pg: str, evidence: JobEvidence) -> str:
    """Every rank the others wait for was not read (a one-node attach of a multi-node job): never "never entered",
    which nothing read says."""
    verb = "wait in" if evidence.live else "entered"
    return (f"rank(s) {_ranks(v.waiting)} {verb} {_in(v.call, v, evidence)}{pg} for rank(s) "
            f"{_ranks(v.culprit_ranks)}, {UNREAD}: whether they entered it, nothing read says")


def fix(v: Verdict) -> str:
    """The verdict's fix: its category's, or the stuck stream's (judge/streams.py)."""
    return streams.FIX if streams.TAG in v.evidence else FIX[v.category]


def to_json(v: Verdict, evidence: JobEvidence) -> dict:
    """run.json's hang.verdict: the documented fields, then the typed ones beside them."""
    out = {"class": LEGACY_CLASS.get(v.category, v.category.value), "category": v.category.value,
           "summary": summary(v, evidence), "fix": fix(v), "collective": collective(v, evidence),
           "culprits": [culprit_json(c, evidence) for c in v.culprits],
           "consequences": [_consequence(c, v, evidence) for c in v.consequences],
           "call_sites": {str(r): user_frame(s.frames).to_json() for r, s in sorted(evidence.ranks.items())
                          if user_frame(s.frames)},
           "named": [c.rank for c in v.culprits if c.named and v.no_culprit is None],
           "likely_culprits": [c.rank for c in v.culprits if not c.named or v.no_culprit is not None],
           "evidence": list(v.evidence)}
    if v.no_culprit is not None:
        out["no_culprit"] = v.no_culprit.value
    if v.no_evidence:
        out["no_evidence"] = list(v.no_evidence)
    if not_read(v, evidence):
        out["not_read"] = not_read(v, evidence)
        if len(out["not_read"]) == len(v.culprit_ranks):  # nothing to look at in a stack: read them first
            out["fix"] = (f"read rank(s) {_ranks(out['not_read'])}: run attach where they run, or on every node of "
                          "the job with --master HOST:PORT (one verdict over every node's ranks)")
    if v.likely:
        out["likely"] = True
    if v.no_majority:
        out["no_majority"] = True
    if v.mismatch:
        out["mismatch"] = v.mismatch
    if v.via:
        out["via"] = list(v.via)
    out["waits"] = {str(r): _wait(s) for r, s in sorted(evidence.ranks.items()) if s.wait is not None}
    unsized = _unjudged(v, evidence)
    if unsized:
        out["notes"] = [unsized]  # said once: the sizes of the send/recv the ranks wait in are in no record
    return out


def _unjudged(v: Verdict, evidence: JobEvidence) -> str | None:
    """Where the ranks wait in send/recv and nothing holds its sizes, the verdict says so (a size mismatch the
    judge found already had its sizes)."""
    from .sizes import unjudged

    return None if v.mismatch else unjudged(evidence)


def _wait(s) -> dict:
    w = s.wait
    out = {"kind": w.kind.value}
    if w.peer is not None:
        out["peer"] = w.peer
    if w.awaited is not None:
        out["awaited"] = list(w.awaited)
    if w.keys:
        out["keys"] = list(w.keys)
    if w.call is not None and w.kind in (WaitKind.COLLECTIVE, WaitKind.SEND, WaitKind.RECV, WaitKind.P2P):
        out["call"] = _call(w.call)
    if w.library is not None:
        out["library"] = {"name": w.library.library, "op": w.library.op, "phrase": w.library.said,
                          "certain": w.library.certain}
    return out


def live_line(verdict: dict, left_s: float | None = None) -> str:
    """One line for the terminal while the job still runs: who the others wait for, where it stands, and when
    the process group's timeout will end the wait (from the hang.verdict document ``to_json`` wrote)."""
    coll = verdict.get("collective") or {}
    waiting = rank_ranges(coll.get("waiting_ranks") or [])
    seq = f" #{coll['seq']}" if coll.get("seq") is not None else ""
    what = f"{coll.get('op')}{seq}" if coll.get("op") else "their wait"
    if coll.get("library"):
        what = f"{coll['library']} ({what})" if seq or coll.get("peer") is not None else coll["library"]
    when = f"; their process-group timeout expires in {max(0.0, left_s):.0f} s" if left_s is not None else ""
    culprits = verdict.get("culprits") or []
    if not culprits or verdict.get("no_culprit"):
        return f"ddpdoctor: hang: no culprit named ({verdict.get('summary')}){when}; the full verdict follows"
    who = "; ".join(f"rank {c['rank']}" + (f" on {c['host']}" if c.get("host") else "")
                    + (f" at {c['where']}" + (f" in {c['function']}" if c.get("function") else "")
                       if c.get("where") else "") for c in culprits)
    likely = "likely " if verdict.get("likely") or verdict.get("likely_culprits") else ""
    if verdict.get("category") == "desync":
        return f"ddpdoctor: hang: {likely}{who} called differently ({verdict.get('mismatch')}) in {what}{when}; " \
               "the full verdict follows"
    head = f"rank(s) {waiting} wait in {what} for " if waiting else "the others wait for "
    return f"ddpdoctor: hang: {head}{likely}{who}{when}; the full verdict follows"
