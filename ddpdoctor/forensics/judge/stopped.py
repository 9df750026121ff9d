"""A job stopped from outside (a scheduler's time limit, scancel, an operator: SIGTERM to every process) while
no rank had failed of its own: not a pass. Hung when it was stopped (a collective pending STALLED_S or more in the
ranks' flight records): the rank the records' verdict names, else none; a stop with no sign of a hang is said as
such, with what would tell."""
from __future__ import annotations

from .classify import RankFailure, Verdict

TELL_APART = ("torchrun's own output (`ddpdoctor postmortem LOGDIR --agent-log FILE` with what torchrun printed: its "
              "failure table gives each rank's exit code and signal) or the ranks' flight-recorder dumps (`--fr-dir`, "
              "or a rerun under `ddpdoctor run-trainer`) tell them apart")
# A collective pending this long when the job was stopped: its ranks had stopped moving (a healthy one completes
# in milliseconds; a slow link's largest all_reduce in seconds).
STALLED_S = 10.0
STOPPED_FIX = ("rerun under `ddpdoctor run-trainer` (it names the rank the others wait for while the job runs, "
               "before your process group's or the scheduler's limit), or give `ddpdoctor postmortem` the ranks' "
               "flight-recorder dumps (--fr-dir)")
# The same, for a job run-trainer ran: its watchdog had not fired yet when the stop came
STOPPED_FIX_TRAINER = ("give the watchdog time to name the rank before the stop: a `--hang-timeout` well below the "
                       "scheduler's time limit (and below your process group's timeout)")


def stopped_from_outside(verdict: Verdict, hang: dict | None, stalled: float | None, signal: str | None,
                         fix: str = STOPPED_FIX) -> None:
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
    culprits = [c for c in (hang or {}).get("culprits") or [] if c.get("rank") is not None] if hung else []
    if hung and culprits and not (hang or {}).get("no_culprit"):
        first = culprits[0]
        likely = "likely " if hang.get("likely") else ""
        verdict.root_cause = RankFailure(
            rank=first["rank"], local_rank=None, host=first.get("host"), exit_code=None, signal=signal,
            category="hang", error_type="stopped_while_hung", location=first.get("where"),
            message=(f"the job was {by} while hung (a collective pending {stalled:.0f} s): {likely}"
                     f"{hang['summary']}"), fix=hang.get("fix") or fix)
        for c in culprits[1:]:
            verdict.consequences.append(RankFailure(rank=c["rank"], local_rank=None, host=c.get("host"),
                                                    exit_code=None, category="hang", named=True,
                                                    reason=f"culprit too ({hang['class']}): see the root cause"))
        return
    what = (f"while hung (a collective pending {stalled:.0f} s), but no record says which rank the others waited "
            "for" if hung else "while no rank had failed; whether it was hung, no record says (no flight-recorder "
            "dump, no stack)")
    verdict.root_cause = RankFailure(
        rank=None, local_rank=None, host=None, exit_code=None, signal=signal, category="hang" if hung else "signal",
        error_type="stopped_while_hung" if hung else "stopped_from_outside", message=f"the job was {by} {what}",
        fix=fix)
