"""A job that no rank's failure explains: never a pass without evidence of a normal end.

Stopped from outside (a scheduler's time limit, scancel, an operator: SIGTERM to every process) while no rank had
failed of its own: hung when it was stopped (a collective pending STALLED_S or more in the ranks' flight records)
with the rank the records' verdict names; else, when the records still put one rank behind the others (its
sequence ids; gloo marks a timed-out collective completed, so no pending time is left to measure), that rank as
the likely one; else none, with what would tell. No failure and no evidence of a normal end (``not_verified``):
what is known, and that the end is not verified."""
from __future__ import annotations

from ..evidence.model import RankFailure
from .dumps import Judged
from .policy import STALLED_S
from .verdict import Category, Findings

TELL_APART = ("torchrun's own output (`ddpdoctor postmortem LOGDIR --agent-log FILE` with what torchrun printed: its "
              "failure table gives each rank's exit code and signal) or the ranks' flight-recorder dumps (`--fr-dir`, "
              "or a rerun under `ddpdoctor run-trainer`) tell them apart")
STOPPED_FIX = ("rerun under `ddpdoctor run-trainer` (it names the rank the others wait for while the job runs, "
               "before your process group's or the scheduler's limit), or give `ddpdoctor postmortem` the ranks' "
               "flight-recorder dumps (--fr-dir)")
# The same, for a job run-trainer ran: its watchdog had not fired yet when the stop came
STOPPED_FIX_TRAINER = ("give the watchdog time to name the rank before the stop: a `--hang-timeout` well below the "
                       "scheduler's time limit (and below your process group's timeout)")


def kept_timeout(timeouts: list[float], stalled: float | None) -> str:
    """Which process-group timeout the job ran under (its flight records' timeout_ms), when it was longer than the
    job stood hung: only the stop could end it. A library may keep its own (HF Trainer on the CPU drops
    ``ddp_timeout``; DeepSpeed's group keeps 30 minutes), whatever the script set."""
    if not timeouts or (stalled is not None and stalled >= timeouts[0]):
        return ""
    said = ", ".join(f"{t:g} s" for t in timeouts[:3])
    return (f"; its collectives ran under a process-group timeout of {said} (the flight records' timeout_ms), so "
            "only the stop could end the wait: a library may keep its own timeout whatever the script set "
            "(HF Trainer on the CPU drops ddp_timeout; DeepSpeed's own group keeps 30 minutes)")


def stopped_from_outside(verdict: Findings, hang: Judged | None, stalled: float | None, signal: str | None,
                         fix: str = STOPPED_FIX, timeouts: list[float] | None = None) -> None:
    """No rank failed of its own, but the job was stopped from outside (``signal``: what torchrun received; a
    scheduler's time limit or scancel sends SIGTERM to the whole job) or its dumps hold a collective pending for
    ``stalled`` seconds: not a pass. A hung job (a collective pending STALLED_S or more) gets the rank the dumps'
    verdict (``hang``) names as its root cause, else no rank; a stop with no sign of a hang is said as such.
    ``fix``: what would have told (run-trainer's own runs: a threshold below the scheduler's limit)."""
    if verdict.root_cause is not None or (signal is None and (stalled is None or stalled < STALLED_S)):
        return
    by = (f"stopped from outside ({signal}: a scheduler's time limit, scancel or an operator)" if signal
          else "stopped")
    hung = stalled is not None and stalled >= STALLED_S
    behind = not hung and signal is not None and _behind(hang)
    culprits = hang.culprits if hang is not None and (hung or behind) else []
    if culprits and hang.verdict.no_culprit is None:
        first = culprits[0]
        place = hang.place(first)
        likely = "likely " if hang.verdict.likely or behind else ""
        state = (f"while hung (a collective pending {stalled:.0f} s)" if hung else
                 "while the ranks' flight records put a rank behind the others (no collective pending long enough "
                 "to measure: the stop may have come mid-step)")
        verdict.root_cause = RankFailure(
            rank=first.rank, local_rank=None, host=place.get("host"), exit_code=None, signal=signal,
            category="hang", error_type="stopped_while_hung", location=place.get("where"),
            message=f"the job was {by} {state}: {likely}{hang.summary()}{kept_timeout(timeouts or [], stalled)}",
            fix=hang.fix() or fix)
        for c in culprits[1:]:
            verdict.consequences.append(RankFailure(rank=c.rank, local_rank=None, host=hang.place(c).get("host"),
                                                    exit_code=None, category="hang", named=True,
                                                    reason=f"culprit too ({hang.legacy_class}): see the root cause"))
        return
    what = (f"while hung (a collective pending {stalled:.0f} s), but no record says which rank the others waited "
            "for" if hung else "while no rank had failed; whether it was hung, no record says (no flight-recorder "
            "dump, no stack)")
    verdict.root_cause = RankFailure(
        rank=None, local_rank=None, host=None, exit_code=None, signal=signal, category="hang" if hung else "signal",
        error_type="stopped_while_hung" if hung else "stopped_from_outside",
        message=f"the job was {by} {what}{kept_timeout(timeouts or [], stalled) if hung else ''}",
        fix=fix)


def stop_explains(failures: list[RankFailure]) -> bool:
    """torchrun was stopped from outside and every failure recorded is one the stop itself makes: a rank whose
    collective broke as the stop (SIGTERM to every process at once) reached a peer first ("Connection closed by
    peer"), or one the launcher stopped. None failed of its own: the stop is judged (stopped_from_outside), not a
    guess at which silent rank left first."""
    return bool(failures) and all(f.victim and f.category in ("peer_lost", "stopped", "signal") for f in failures)


# The dumps' verdicts that place one rank behind the others by its records alone (sequence ids, the call it never
# made): at a stop from outside, the likely rank the job waited for.
BEHIND = (Category.MISSING_RANK, Category.MISSING_PEER, Category.NEVER_INITIALIZED, Category.DESYNC,
          Category.STUCK_COLLECTIVE)


def _behind(hang: Judged | None) -> bool:
    return hang is not None and hang.category in BEHIND and any(c.named for c in hang.culprits)


UNVERIFIED_FIX = ("at their default log levels torchrun and srun write nothing when a job ends normally: under SLURM "
                  "give the job's id (`--run-id JOB`: SLURM's record, sacct or `scontrol show job`, says COMPLETED "
                  "with exit code 0:0), or give `ddpdoctor postmortem` torchrun's own output with `--agent-log FILE` "
                  "from a run at LOGLEVEL=INFO (it says when its worker group succeeded), or run the job under "
                  "`ddpdoctor run-trainer` (each rank's record at exit says how it ended)")


def not_verified(verdict: Findings, normal_end: bool, ranks: list[int], fix: str = UNVERIFIED_FIX) -> bool:
    """No rank failed, nothing stopped the job that a record says, and no evidence of a normal end
    (``normal_end``: evidence.ending): a rank's logs end the same way when its script returned and when a
    scheduler's SIGTERM or the OOM killer's SIGKILL ended it (no error file is written for a signal). The root
    cause then says what is known (``ranks``: those the logs hold) and that the end is not verified. True when
    it did."""
    if verdict.root_cause is not None or normal_end:
        return False
    seen = f"{len(set(ranks))} rank(s)" if ranks else "no rank"
    verdict.root_cause = RankFailure(
        rank=None, local_rank=None, host=None, exit_code=None, category="unverified", error_type="not_verified",
        message=(f"no rank recorded a failure ({seen} in the logs: no error file, no traceback, no signal in "
                 "torchrun's output), but nothing shows the job ended normally either: a stop by a signal "
                 "(scancel, a time limit, the OOM killer) leaves the same logs; not verified"),
        fix=fix)
    return True
