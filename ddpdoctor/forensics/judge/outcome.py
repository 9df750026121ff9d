"""The forensics' one answer: a frozen ``Outcome`` (a state, one ``Category`` vocabulary, the culprits with rank, node
and where they stand, the consequences, the evidence tags and the threshold as data), the same shape for the live
watchdog, run-trainer's end, postmortem and attach. ``STATE_TABLE`` maps a state to the verdict word and the exit
code; words come last, from the Outcome (judge/words.py, report/)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

from ...exitcodes import ExitCode
from .policy import ThresholdSource


class State(str, Enum):
    PASS = "pass"                  # evidence of a normal end
    FAIL = "fail"                  # a rank failed (the root cause is named, or said why not)
    HANG = "hang"                  # some rank waits and nothing moved past the threshold
    PROGRESSING = "progressing"    # the job moves (attach)
    UNDECIDED = "undecided"        # not a hang, not shown to move: computing, or waiting on a busy rank
    UNVERIFIED = "unverified"      # no failure and no evidence of a normal end
    INTERRUPTED = "interrupted"    # stopped on request (a signal to run-trainer)


# state -> (the verdict word every document carries, the exit code); INTERRUPTED: 128 + the signal
STATE_TABLE = {
    State.PASS: ("pass", ExitCode.OK),
    State.FAIL: ("fail", ExitCode.FAIL),
    State.HANG: ("fail", ExitCode.FAIL),
    State.PROGRESSING: ("pass", ExitCode.OK),
    State.UNDECIDED: ("warn", ExitCode.OK),
    State.UNVERIFIED: ("warn", ExitCode.NOT_VERIFIED),
    State.INTERRUPTED: ("fail", ExitCode.TERMINATED),
}


class Category(str, Enum):
    """One vocabulary for what happened: a rank's own failure (judge/classify), the shape of a hang (the wait-for
    graph, judge/graph) and the job's motion (judge/policy). report/wording.py words each value."""
    # a rank's own failure
    EXCEPTION = "exception"
    PEER_LOST = "peer_lost"
    SIGNAL = "signal"
    TIMEOUT = "timeout"
    DESYNC = "desync"
    OOM = "oom"
    CUDA = "cuda"
    NCCL = "nccl"
    LAUNCHER_ENV = "launcher_env"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    CONNECT = "connect"
    RESTART_CONNECT = "restart_connect"
    CONSEQUENCE = "consequence"
    USAGE = "usage"
    HANG = "hang"
    SIZE_MISMATCH = "size_mismatch"
    # the shape of a hang
    MISSING_RANK = "missing_rank"              # the others wait in a collective this rank never entered
    MISSING_PEER = "missing_peer"              # a send/recv waits for a peer that is elsewhere
    NEVER_INITIALIZED = "never_initialized"    # the others wait in init_process_group / the store for this rank
    STUCK_COLLECTIVE = "stuck_collective"      # every member inside the same call, none completes
    STUCK_INIT = "stuck_init"                  # every rank inside init_process_group / the store, none missing
    PROCESS_STOPPED = "process_stopped"        # SIGSTOP, D state
    PROCESS_GONE = "process_gone"              # vanished
    ENDED_EARLY = "ended_early"                # exited 0 (or sys.exit) while the others went on
    KILLED = "killed"                          # ended by a signal nobody in the job sent
    OUTSIDE_COLLECTIVES = "outside_collectives"  # nobody waits in anything: every rank in its own code
    # the job's motion
    PROGRESSING = "progressing"
    COMPUTING = "computing"
    WAITING_ON_BUSY = "waiting_on_busy"
    NO_MOVEMENT = "no_movement"
    NO_JOB = "no_job"
    NORMAL_END = "normal_end"
    UNKNOWN = "unknown"                        # no evidence

    @classmethod
    def of(cls, value) -> "Category":
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class Place:
    """A rank the outcome names: where it stands (file:line and function, when a stack or traceback says)."""
    rank: int | None
    host: str | None = None
    node: str | None = None
    where: str | None = None
    function: str | None = None
    named: bool = True          # False: only the likely one
    why: str = ""               # machine tag of the rule that named it, or a consequence's reason


@dataclass(frozen=True)
class Threshold:
    seconds: float
    source: ThresholdSource
    why: str = ""


@dataclass(frozen=True)
class Record:
    """The failures behind an outcome as each rank's own record says them (message, fix, traceback): what the
    documents' older keys root_cause, consequences and culprit_ranks carry, and the words the renderers use."""
    root: dict | None = None
    consequences: tuple[dict, ...] = ()
    culprit_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Outcome:
    state: State
    category: Category
    culprits: tuple[Place, ...] = ()
    consequences: tuple[Place, ...] = ()
    evidence: tuple[str, ...] = ()
    threshold: Threshold | None = None
    entry: str = ""             # which collector decided: live, run-trainer, postmortem, attach
    record: Record | None = field(default=None, compare=False)  # a finished job's: the records behind it

    @property
    def verdict(self) -> str:
        return STATE_TABLE[self.state][0]

    def exit_code(self, signal: int | None = None) -> int:
        """``signal``: what stopped the collector on request; a run stopped so exits 128 + it, whatever it
        found (the shell's convention: a script around it tells a stop from a failure)."""
        if signal:
            return 128 + signal
        return int(STATE_TABLE[self.state][1])

    @property
    def culprit_ranks(self) -> list[int]:
        return [c.rank for c in self.culprits if c.rank is not None]

    def to_json(self) -> dict:
        out = asdict(self)  # tuples stay tuples there: lists, as every document's rank lists are (rank_lists)
        out.update(state=self.state.value, category=self.category.value, verdict=self.verdict,
                   culprits=list(out["culprits"]), consequences=list(out["consequences"]),
                   evidence=list(out["evidence"]))
        del out["record"]  # the records are the documents' own keys (root_cause, consequences), not repeated here
        if self.threshold is not None:
            out["threshold"] = dict(out["threshold"], source=self.threshold.source.value)
        return out
