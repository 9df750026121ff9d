"""The one decision every collector ends with: ``decide(verdict, failures, context) -> Outcome``. The live watchdog
and run-trainer's end, postmortem and attach gather evidence and judge it (the wait-for graph, attribution, the stop
rule, the movement policy); this turns what they found into the one typed Outcome each document carries as
``outcome``: the state (STATE_TABLE gives the verdict word and the exit code), one category, the culprits with
where they stand, the consequences, the threshold as data."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..evidence.model import RankFailure
from .outcome import Category, Outcome, Place, State, Threshold
from .policy import ThresholdSource

# attach's motion categories (attach/decide.py) as states: not a verdict on a hang
MOTION = {"progressing": (State.PROGRESSING, Category.PROGRESSING),
          "no_job": (State.PROGRESSING, Category.NO_JOB)}
# a root cause that stands for the hang the judge described (the watchdog's, a stop while hung)
HANG_ROOTS = {"hang"}


@dataclass(frozen=True)
class Failures:
    """A finished job's failures as attributed (judge.attribution): the root cause, its consequences, and the
    ranks the verdict names."""
    root: RankFailure | None = None
    consequences: tuple[RankFailure, ...] = ()
    culprit_ranks: tuple[int, ...] = ()

    @classmethod
    def of(cls, root: dict | None, consequences: list[dict] | None, culprit_ranks: list[int] | None) -> "Failures":
        return cls(RankFailure(**root) if root else None,
                   tuple(RankFailure(**c) for c in consequences or ()), tuple(culprit_ranks or ()))


@dataclass(frozen=True)
class Context:
    """What the collector knows of how the job stands or ended, beside the verdict and the failures."""
    entry: str                              # live, run-trainer, postmortem, attach
    failed: bool = False                    # the job failed (torchrun's exit code, a rank's record, a hang stopped)
    normal_end: bool = False                # evidence of a normal end (torchrun's word, every rank's exit record)
    interrupted: int | None = None          # the signal run-trainer itself received
    motion: str | None = None               # attach: its reading's category (progressing, no_movement)
    busy: tuple[int, ...] = ()              # attach: ranks working in their own code while others wait
    threshold: dict | None = None           # the limit that made silence a hang (run.json's hang.threshold)
    hung: bool = False                      # the watchdog judged the job hung (live), whatever the judge could name
    tags: tuple[str, ...] = field(default_factory=tuple)


def decide(verdict: dict | None, failures: Failures, context: Context) -> Outcome:
    """``verdict``: the judge's verdict on the job's collectives and stacks (words.to_json of the wait-for graph's
    Verdict), when one was judged; ``failures``: the ranks' failures attributed."""
    tags = tuple((verdict or {}).get("evidence") or ()) + context.tags
    common = dict(entry=context.entry, evidence=tags, threshold=_threshold(context.threshold))
    if context.motion in MOTION:
        state, category = MOTION[context.motion]
        return Outcome(state, category, **common)
    if context.motion == "no_movement":
        category = Category.WAITING_ON_BUSY if context.busy and (verdict or {}).get("waiting") else \
            Category.COMPUTING if context.busy else Category.NO_MOVEMENT
        return Outcome(State.UNDECIDED, category, **common)
    root = failures.root
    if context.interrupted and (root is None or root.category == "interrupted"):
        return Outcome(State.INTERRUPTED, Category.INTERRUPTED, consequences=_consequences(failures), **common)
    if not context.failed:
        state = State.PASS if context.normal_end else State.UNVERIFIED
        return Outcome(state, Category.NORMAL_END if context.normal_end else Category.UNKNOWN, **common)
    hang = (verdict is not None or context.hung) and (root is None or root.category in HANG_ROOTS)
    category = Category.of((verdict or {}).get("category")) if hang else Category.of(root.category if root else None)
    ranks = failures.culprit_ranks or tuple(c["rank"] for c in (verdict or {}).get("culprits") or ())
    culprits = tuple(_place(rank, verdict, root) for rank in ranks)
    return Outcome(State.HANG if hang else State.FAIL, category, culprits, _consequences(failures), **common)


def _place(rank: int, verdict: dict | None, root: RankFailure | None) -> Place:
    """Where a culprit stands: the judge's word (its stack), else its own record (a traceback's file:line)."""
    named = set((verdict or {}).get("named") or ())
    for c in (verdict or {}).get("culprits") or ():
        if c.get("rank") == rank:
            return Place(rank, c.get("host"), c.get("node"), c.get("where") or c.get("last_seen_where"),
                         c.get("function"), named=rank in named or not (verdict or {}).get("likely_culprits"),
                         why=str(c.get("why") or ""))
    if root is not None and root.rank == rank:
        return Place(rank, root.host, None, root.location, None, named=root.named is not False,
                     why=root.category)
    return Place(rank)


def _consequences(failures: Failures) -> tuple[Place, ...]:
    return tuple(Place(f.rank, f.host, None, f.location, None, named=False, why=f.reason or f.category)
                 for f in failures.consequences)


def _threshold(threshold: dict | None) -> Threshold | None:
    if not threshold or threshold.get("seconds") is None:
        return None
    try:
        source = ThresholdSource(threshold.get("source"))
    except ValueError:
        return None
    return Threshold(float(threshold["seconds"]), source, str(threshold.get("why") or ""))
