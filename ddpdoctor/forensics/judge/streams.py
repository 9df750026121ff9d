"""A collective every rank enqueued whose kernel some ranks never started: their streams are stuck, and the ranks
that started theirs wait for them inside it.

NCCL's flight record keeps each entry's state: "scheduled" (enqueued, its start event never seen:
``time_discovered_started_ns`` 0), "started" (its kernel runs), "completed" (torch's FlightRecorderDetail.hpp,
dump_json: completed if time_discovered_completed_, else started if time_discovered_started_, else scheduled).
Where every rank's oldest pending collective is the same one, the sequence ids name nobody (every rank is inside);
the ranks whose entry is still scheduled while others' started are the ones behind: their stream runs something
before it (a hung kernel, a wait on another stream or event, a device fault). gloo records no such states."""
from __future__ import annotations

from ..evidence.model import Call, JobEvidence
from .culprits import culprit
from .outcome import Category
from .verdict import Verdict

TAG = "scheduled_not_started"
SUMMARY = ("rank(s) {behind} never started {call}{pg} that every rank enqueued: its kernel is scheduled, not started "
           "(the rank's CUDA stream is stuck behind earlier work), while rank(s) {started} started theirs and wait "
           "inside it")
FIX = ("look at what the culprit's stream runs before the collective: a hung kernel, a wait on another stream or "
       "event, a device fault (`nvidia-smi`, `ddpdoctor preflight --only gpu,gpu-health` on its host); its Python "
       "stack may stand where the others' do, since the launch returned")


def not_started(evidence: JobEvidence) -> Verdict | None:
    """The verdict naming the ranks whose copy of the one pending collective is scheduled while others' started;
    None where the ranks do not all stand in the same pending collective, or no record says started/scheduled."""
    pending = {r: _oldest_pending(s.calls) for r, s in evidence.ranks.items() if s.recorded}
    expected = evidence.expected()
    if not pending or any(c is None for c in pending.values()) or set(expected) - set(pending):
        return None
    keys = {(c.group.name, c.seq) for c in pending.values()}
    if len(keys) != 1:
        return None
    behind = sorted(r for r, c in pending.items() if c.state == "scheduled")
    started = sorted(r for r, c in pending.items() if c.state == "started")
    if not behind or not started:
        return None
    call = pending[started[0]]
    v = Verdict(Category.STUCK_COLLECTIVE, [culprit(evidence, r, True, TAG) for r in behind], call=call,
                waiting=started, calls={r: pending[r] for r in sorted(pending)})
    v.evidence.append(TAG)
    return v


def summary(v: Verdict, names: str, started: str, call: str, pg: str) -> str:
    return SUMMARY.format(behind=names, started=started, call=call, pg=pg)


def _oldest_pending(calls: tuple[Call, ...]) -> Call | None:
    """A rank's oldest numbered collective not completed, where its record says started or scheduled."""
    return next((c for c in calls if c.seq is not None and not c.completed and c.state in ("started", "scheduled")),
                None)
