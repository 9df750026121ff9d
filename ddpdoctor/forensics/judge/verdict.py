"""The judge's answer as data: a category, the culprit ranks (each with an explicit ``named`` flag: named for
certain, or only the likely one), where they stand, the evidence that decided it, and the ranks that waited
(consequences). Worded last: ``forensics/judge/words.py`` and ``report/console_trainer.py``."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..evidence.model import Call, Frame, RankFailure, WaitKind
from .outcome import Category  # noqa: F401 - the one vocabulary (judge/outcome.py)


class NoCulprit(str, Enum):
    """Why no rank is named."""
    CYCLE = "cycle"                # the waits lead round in a circle (a deadlock): no rank waits in nothing
    TIE = "tie"                    # two equal camps of calls: either may be the wrong one
    NO_EVIDENCE = "no_evidence"    # nothing answered
    EVERYONE = "everyone"          # every rank stands in the same place (a stuck communication)


@dataclass
class Culprit:
    rank: int
    named: bool                            # True: the evidence names it; False: the likely one ("likely")
    where: Frame | None = None
    host: str | None = None
    node: str | None = None
    pid: int | None = None
    state: str | None = None               # the process's state as seen ("running", "stopped", ...)
    why: str = ""                          # short machine tag of the rule that named it
    last_seen: Call | None = None          # where its record last saw it (dumps with no stack)
    ended: dict | None = None              # {"exit_code", "where"} when it ended of its own


@dataclass
class Consequence:
    rank: int
    waited_for: tuple[int, ...]
    kind: WaitKind
    call: Call | None = None
    where: Frame | None = None
    host: str | None = None
    node: str | None = None
    pid: int | None = None
    state: str | None = None
    aborted: bool = False                  # the backend aborted it (it detected a mismatch: never the culprit)


@dataclass
class Verdict:
    category: Category
    culprits: list[Culprit] = field(default_factory=list)
    no_culprit: NoCulprit | None = None
    call: Call | None = None               # the collective/op the others wait in (or the mismatched one)
    calls: dict[int, Call] = field(default_factory=dict)       # each rank's call, for a mismatch
    waiting: list[int] = field(default_factory=list)           # ranks inside ``call``
    last_seq: dict[int, int] = field(default_factory=dict)     # per rank, its last sequence id in the group
    via: list[int] = field(default_factory=list)               # ranks that waited, in a chain, for the culprit
    consequences: list[Consequence] = field(default_factory=list)
    no_evidence: list[int] = field(default_factory=list)       # ranks no source answered for
    likely: bool = False                                       # the evidence is thin: "likely"
    evidence: list[str] = field(default_factory=list)          # machine tags of what decided it
    mismatch: str | None = None                                # "op", "sizes", "dtypes", "splits"

    @property
    def culprit_ranks(self) -> list[int]:
        return [c.rank for c in self.culprits]

    @property
    def no_majority(self) -> bool:
        """Two equal camps of calls: either may be the wrong one."""
        return self.no_culprit == NoCulprit.TIE or "tie_new_call" in self.evidence


@dataclass(frozen=True)
class AttemptRecords:
    """One attempt's failure records as a collector read them (postmortem/analysis.py), with what their
    attribution needs to know of the folders they came from; attributed in decide() only (judge/attribution.py
    ``attribute``), never by the collector."""
    attempt: int
    failures: tuple[RankFailure, ...]
    silent: tuple[RankFailure, ...]  # the attempt's ranks that left no failure record (none: a stop explains them)
    host: str | None                 # this machine, where its folders are its own (None: several nodes' folders)
    listed: bool                     # torchrun's failure tables cover every node: a rank they omit did not fail
    closing_signals: int             # ranks torchrun says it sent its closing signal, beyond those it lists
    last: bool


@dataclass
class Findings:
    """A finished job's failures: each attempt's records as read (``records``), then, once decide() attributed
    them (judge.attribution.attribute), the root cause and its consequences, each attempt's. The hang's own
    verdict is ``Verdict`` above."""
    root_cause: RankFailure | None
    consequences: list[RankFailure] = field(default_factory=list)
    attempts: list[dict] = field(default_factory=list)
    records: list[AttemptRecords] = field(default_factory=list)
    attributed: bool = False
    # The last attempt's failure records as read (before attribution), and every rank of that attempt its log
    # dir shows: the evidence the judge (forensics.judge) reads beside the flight-recorder dumps.
    failures: list[RankFailure] = field(default_factory=list)
    world: list[int] = field(default_factory=list)
    # The signal torchrun itself received from outside (a scheduler's time limit, scancel, Ctrl-C), from its log.
    stopped_by: str | None = None
