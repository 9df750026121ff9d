"""The watchdog's evidence -> RankState: what each rank's worker server answered (its flight recorder, its
stacks by faulthandler; SIGUSR1's or py-spy's stacks when it did not answer) and its process state.

Input per rank: {"host", "node", "pid", "state", "fr", "stacks", "local_rank"} (hang.Watchdog.collect; another
node's watchdog publishes the same through the shared run dir). A rank whose flight recorder answered is
placed in collectives by it (a stack's torch frame says no more than the record); its stack says where it
stands and what else it waits in (send/recv, init_process_group, a store).
"""
from __future__ import annotations

from . import flight_recorder, stacks
from .model import Ending, EndKind, JobEvidence, RankState, Source, WaitKind

STATES = {"stopped": EndKind.STOPPED, "disk-sleep": EndKind.STOPPED, "gone": EndKind.GONE,
          "zombie": EndKind.GONE, "running": EndKind.RUNNING}


def rank_state(rank: int, ev: dict, live: bool = True, source: Source = Source.WORKER_SERVER) -> RankState:
    fr = ev.get("fr")
    base = flight_recorder.rank_state(rank, fr, source, live=live) if fr is not None else RankState(rank, source)
    frames = stacks.main_thread(ev.get("stacks"))
    wait = base.wait
    seen = stacks.wait_of(frames) if frames else None
    if seen is not None and not (base.recorded and seen.kind == WaitKind.COLLECTIVE):
        wait = wait or seen
    elif seen is not None and wait is None and seen.kind == WaitKind.COLLECTIVE and base.recorded:
        wait = None  # the record says every collective it entered completed: it is in its own code
    state = ev.get("state")
    ending = base.ending or (Ending(STATES[state]) if state in STATES else None)
    return RankState(rank, source, host=ev.get("host"), node=ev.get("node"), pid=ev.get("pid"),
                     local_rank=ev.get("local_rank"), frames=frames, wait=wait, ending=ending, calls=base.calls,
                     groups=base.groups, recorded=base.recorded,
                     raw={"state": state} if isinstance(state, str) else {})


def job(evidence: dict[int, dict], expected: list[int] | None = None, live: bool = True) -> JobEvidence:
    """Every rank's answers as one JobEvidence (``expected``: every rank of the job, when known)."""
    out = JobEvidence(live=live, world=tuple(sorted(set(expected or []))))
    for rank, ev in sorted(evidence.items()):
        out.add(rank_state(rank, ev or {}, live=live))
    return out
