"""The user's own process-group timeout, when it comes before the hang threshold: how long before it expires the
watchdog takes every rank's evidence, and the threshold that then made the hang, as data."""
from __future__ import annotations

from ..judge import policy


def margin(poll: float, timeout: float) -> float:
    """How long before the process group's timeout the evidence is taken: one polling period (a poll's own
    flight-recorder round may be that late) and 3 s for the collection itself, at most half the timeout."""
    return min(poll + 3.0, timeout / 2)


def threshold(early: dict, hang_s: float, stop: bool) -> dict:
    """run.json's ``threshold`` of a hang the process group's timeout decided (``early``: the evidence taken before
    it, with its deadline and timeout; ``hang_s``: ddpdoctor's own limit as it stood then)."""
    lead = early["deadline"] - early["at"]
    taken = (f"every rank's evidence was taken {lead:.1f} s before it expired" if lead >= 0.05 else
             "every rank's evidence was taken as it expired (collecting it outlasted the margin)")
    return {"seconds": early["timeout"], "source": policy.ThresholdSource.PROCESS_GROUP.value,
            "why": (f"your process group's own {early['timeout']:g} s timeout (init_process_group's timeout=) came "
                    f"before ddpdoctor's own hang limit ({hang_s} s), so {taken}, after the ranks had waited "
                    f"{early['waited_s']:g} s, and " + ("the job was stopped when it expired" if stop else
                                                       "the job then ended by that timeout"))}


def pending(records: dict[int, dict], gone: set[int]) -> list[tuple[float, float]]:
    """(deadline, timeout) of the oldest pending collective in each rank's newest record. A rank no longer
    running (``gone``) has no deadline: its last poll may have caught a collective it then completed; the ranks
    left waiting for it carry their own."""
    from ..evidence import worker_client

    return [d for d in (worker_client.pending_deadline(fr) for r, fr in records.items() if r not in gone) if d]
