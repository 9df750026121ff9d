"""What a finished job left -> RankState: each rank's failure record (torchrun's table, error.json, stderr.log,
read and classified by postmortem/classify: ``RankFailure``), the stacks the bootstrap wrote on the launcher's
SIGTERM (stacks/sigterm/rank<R>.txt), and the ranks of an attempt that left no record at all.

A failure record says how the rank ended (exit code, signal, who ended it: the launcher, the backend's abort,
a lost peer, or itself) and, from its traceback, where it stood and what it waited in: a collective, a
send/recv, init_process_group or a store wait; a store's timeout names the keys (and so the ranks) awaited.
"""
from __future__ import annotations

from pathlib import Path

from . import job_files
from . import stacks
from .model import Ending, EndKind, Ender, JobEvidence, RankState, Source, Wait, WaitKind

STOP_SIGNALS = ("SIGTERM", "SIGINT")


def ending_of(f) -> Ending:
    """How a RankFailure says the rank ended; who ended it from its category (classify's typed result)."""
    timed_out = f.category == "timeout"
    if f.signal:
        if f.category == "peer_lost":
            by = Ender.PEER_LOSS
        elif f.category == "desync" and f.signal == "SIGABRT":
            by = Ender.BACKEND  # gloo aborted the rank that received a message of another size
        elif f.signal in STOP_SIGNALS or (f.signal == "SIGKILL" and f.victim):
            by = Ender.LAUNCHER
        elif f.signal == "SIGKILL":
            by = Ender.OUTSIDE
        else:
            by = Ender.ITSELF
        if f.category in ("exception", "oom", "cuda", "launcher_env") and f.signal in STOP_SIGNALS:
            return Ending(EndKind.EXCEPTION, f.exit_code, f.signal, f.error_type, f.message, Ender.ITSELF)
        return Ending(EndKind.SIGNALLED, f.exit_code, f.signal, f.error_type, f.message, by, timed_out)
    by = {"peer_lost": Ender.PEER_LOSS, "stopped": Ender.LAUNCHER, "desync": Ender.BACKEND}.get(f.category, Ender.ITSELF)
    if f.category == "timeout":
        by = Ender.BACKEND
    kind = EndKind.EXCEPTION if (f.error_type or f.message or f.traceback) else EndKind.EXITED
    return Ending(kind, f.exit_code, None, f.error_type, f.message, by, timed_out)


def from_failure(f) -> RankState | None:
    """One rank's failure record as a RankState (None: a record of no rank, torchrun's own)."""
    if f.rank is None:
        return None
    frames = stacks.traceback_frames(f.traceback)
    if not frames and f.log_tail:
        frames = stacks.main_thread(_fatal_dump(f.log_tail))
    wait = stacks.wait_of(frames) if frames else None
    keys, awaited = stacks.store_keys("\n".join(x for x in (f.message or "", f.traceback or "") if x))
    if keys:
        kind = WaitKind.INIT if wait is not None and wait.kind == WaitKind.INIT else WaitKind.STORE
        wait = Wait(kind, call=wait.call if wait else None, awaited=awaited, keys=keys,
                    site=wait.site if wait else None)
    return RankState(f.rank, Source.ERROR_FILE, host=f.host, local_rank=f.local_rank, frames=frames, wait=wait,
                     ending=ending_of(f), raw={"category": f.category})


def _fatal_dump(text: str) -> str:
    """faulthandler's "Fatal Python error" dump in a log (a C++ abort): its stacks."""
    idx = text.rfind("Fatal Python error")
    return text[idx:] if idx >= 0 else ""


def from_sigterm_stacks(folder: Path, ranks: list[int], dumps: dict | None = None,
                        within_s: float = 60.0) -> list[RankState]:
    """Where each rank stood when the launcher stopped it (the bootstrap's stack on SIGTERM). Only a stack still
    in the script (its `<module>` frame) counts: a rank already exiting says nothing there; and only one written
    near the rank's flight record (``dumps``: rank -> (path, record)) when there is one (else another attempt's)."""
    out = []
    for rank in ranks:
        path = folder / f"rank{rank}.txt"
        try:
            mtime = path.stat().st_mtime
            if dumps and rank in dumps and abs(mtime - Path(dumps[rank][0]).stat().st_mtime) > within_s:
                continue
        except OSError:
            continue
        frames = stacks.main_thread(job_files.read_tail(path, 256 << 10))
        if not stacks.has_script(frames):
            continue
        out.append(RankState(rank, Source.SIGTERM_STACK, frames=frames, wait=stacks.wait_of(frames),
                             ending=Ending(EndKind.SIGNALLED, signal="SIGTERM", by=Ender.LAUNCHER)))
    return out


def job_after(failures: list, dumps: dict | None = None, stacks_dir: Path | None = None,
              world: list[int] | None = None) -> JobEvidence:
    """What a finished job left, as one JobEvidence: flight-recorder dumps (rank -> (path, record)), the failure
    records, the SIGTERM stacks (a rank's own traceback outranks its stack). ``world``: every rank of the job."""
    from . import flight_recorder

    ev = JobEvidence(live=False, world=tuple(sorted(set(world or []))))
    for rank, (_, fr) in sorted((dumps or {}).items()):
        ev.add(flight_recorder.rank_state(rank, fr))
    traced = set()
    for f in failures:
        state = from_failure(f)
        if state is not None:
            if state.frames and (state.ending is None or state.ending.by != Ender.LAUNCHER):
                traced.add(state.rank)
            ev.add(state)
    if stacks_dir is not None:
        for state in from_sigterm_stacks(stacks_dir, ev.expected(), dumps):
            if state.rank not in traced:
                _place(ev, state)
    return ev


def _place(ev: JobEvidence, state: RankState) -> None:
    """A SIGTERM stack places a rank: its frames and what they wait in replace a record's launcher-only view."""
    have = ev.ranks.get(state.rank)
    if have is None:
        ev.add(state)
        return
    wait = have.wait if have.wait is not None and have.wait.kind not in (WaitKind.NONE, WaitKind.UNKNOWN) else None
    if have.recorded and state.wait is not None and state.wait.kind == WaitKind.COLLECTIVE:
        wait = wait or None  # its flight record places it in collectives
    elif wait is None:
        wait = state.wait
    from dataclasses import replace

    ev.ranks[state.rank] = replace(have, frames=state.frames, wait=wait, ending=have.ending or state.ending,
                                   sources=tuple(dict.fromkeys(have.sources + (Source.SIGTERM_STACK,))))
