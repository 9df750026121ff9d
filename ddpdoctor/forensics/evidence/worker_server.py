"""The watchdog's evidence -> RankState: what each rank's worker server answered (its flight recorder, its
stacks by faulthandler; SIGUSR1's or py-spy's stacks when it did not answer) and its process state.

Input per rank: {"host", "node", "pid", "state", "fr", "stacks", "local_rank"} (hang.Watchdog.collect; another
node's watchdog publishes the same through the shared run dir). A rank whose flight recorder answered is
placed in collectives by it (a stack's torch frame says no more than the record); its stack says where it
stands and what else it waits in (send/recv, init_process_group, a store).
"""
from __future__ import annotations

from dataclasses import replace

from ...numbers import parse_int
from . import flight_recorder, lagging, stacks
from .model import Ending, EndKind, JobEvidence, RankState, Source, Wait, WaitKind

STATES = {"stopped": EndKind.STOPPED, "disk-sleep": EndKind.STOPPED, "gone": EndKind.GONE,
          "zombie": EndKind.GONE, "running": EndKind.RUNNING}


def rank_state(rank: int, ev: dict, live: bool = True, source: Source = Source.WORKER_SERVER) -> RankState:
    fr = ev.get("fr")
    base = flight_recorder.rank_state(rank, fr, source, live=live) if fr is not None else RankState(rank, source)
    frames = stacks.main_thread(ev.get("stacks"))
    wait, calls = base.wait, base.calls
    seen = stacks.wait_of(frames) if frames else None
    if seen is not None and not (base.recorded and seen.kind == WaitKind.COLLECTIVE):
        wait = wait or seen
    elif seen is not None and wait is None and live and base.recorded:
        wait, calls = _inside_last(fr, calls, seen)
    if wait is not None and seen is not None and seen.library is not None and wait.library is None \
            and wait.kind == seen.kind:
        # the library that made the call; the record's pending collective confirms a wait the frames only fit
        wait = replace(wait, library=replace(seen.library, certain=True), site=wait.site or seen.site)
    state = ev.get("state")
    ending = base.ending or (Ending(STATES[state]) if state in STATES else None)
    return RankState(rank, source, host=ev.get("host"), node=ev.get("node"), pid=ev.get("pid"),
                     local_rank=ev.get("local_rank"), frames=frames, wait=wait, ending=ending, calls=calls,
                     groups=base.groups, recorded=base.recorded,
                     raw={"state": state} if isinstance(state, str) else {})


def _inside_last(fr: dict, calls: tuple, seen: Wait) -> tuple[Wait | None, tuple]:
    """The stack stands in a collective the record shows no pending entry for. gloo counts its send/recv in
    pg_status's counters but records no entry for them: a pipeline's counters run ahead of the entries'
    sequence ids. When the group still has ops pending (enqueued above completed) and the rank's newest entry is
    the op its stack stands in, it is inside that one; else every collective it entered completed: its own code."""
    pending = any(_num(st.get("last_enqueued_collective")) > _num(st.get("last_completed_collective"))
                  for st in (fr.get("pg_status") or {}).values() if isinstance(st, dict))
    last = max((i for i, c in enumerate(calls) if c.seq is not None), default=None, key=lambda i: calls[i].seq)
    if not pending or last is None or seen.call is None or calls[last].op != seen.call.op:
        return None, calls
    inside = replace(calls[last], completed=False)  # its library, confirmed by the record: the caller adds it
    return (Wait(WaitKind.COLLECTIVE, call=inside, site=seen.site),
            calls[:last] + (inside,) + calls[last + 1:])


def _num(v) -> int:
    n = parse_int(v, lo=-1, hi=1 << 62, signed=True)
    return -1 if n is None else n


def job(evidence: dict[int, dict], expected: list[int] | None = None, live: bool = True) -> JobEvidence:
    """Every rank's answers as one JobEvidence (``expected``: every rank of the job, when known)."""
    out = JobEvidence(live=live, world=tuple(sorted(set(expected or []))))
    for rank, ev in sorted(evidence.items()):
        out.add(rank_state(rank, ev or {}, live=live))
    return lagging.settle(out)  # a live record gloo has not caught up on is not a wait
