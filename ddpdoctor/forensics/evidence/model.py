"""The evidence model: one typed record of a rank's state, whatever source it was read from (flight recorder,
worker server, faulthandler/SIGTERM stacks, py-spy, torchrun's error files and logs, the agent's log).

Every record says three things about one rank:

- **where it stands**: its main thread's ``frames``, innermost first, under ONE library-frame rule
  (``is_library``) and ONE "innermost user frame" function (``user_frame``);
- **what it waits in** (``wait``): a collective (group, op, sequence id, sizes, dtypes, splits), a send or a
  recv with its peer, ``init_process_group``, a store wait with the keys awaited, a barrier, or nothing;
- **how it ended** (``ending``): still running, exited with a code, killed by a signal, raised an exception,
  stopped (SIGSTOP, D state) or gone; and who ended it (the launcher's SIGTERM, the backend's abort).

Plus what it called before (``calls``: the collectives it entered, in order, for mismatch comparisons).

Adding an evidence source: write ``forensics/evidence/<source>.py`` with a function that reads its input and
returns ``RankState`` records, each with ``source`` set and only the fields that source knows (leave the rest
at their defaults: ``None``/empty means "this source does not say"). Parse numbers with
``ddpdoctor.numbers.parse_int``; read files through ``forensics.evidence.job_files``. Put them in a ``JobEvidence``
with ``JobEvidence.add`` (records of one rank from several sources merge: a field one source leaves empty
is taken from another; ``Source`` order says whose wins when both say something), then call
``forensics.judge.judge(evidence)``. Decide nothing from message text: a source turns text into these fields
(a store key into ``Wait.awaited``, a signal number into ``Ending.signal``) and the judge reads fields only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import Enum

from . import user_code

# ONE library-frame rule: a frame whose file is under one of these is not the user's code. The interpreter's
# own modules, installed packages (torch included), torch's elastic agent and ddpdoctor's bootstrap.
LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "torch/distributed/elastic", "<frozen ",
           "ddpdoctor/launch/bootstrap.py", "<string>")


NATIVE = (".so", ".dylib", ".dll", ".pyd")


def is_library(file: str) -> bool:
    """The one rule: is this frame's file a library's (not the user's code)? Native frames (py-spy --native: a
    shared object such as libc.so.6 or libtorch_cpu.so) are the libraries' too; the job's own package is the
    user's code wherever it is installed (user_code: site-packages too)."""
    file = file or ""
    if is_native(file):
        return True
    return any(part in file for part in LIBRARY) and not user_code.is_users(file)


def is_native(file: str) -> bool:
    """A shared object's frame (libc.so.6, libtorch_cpu.so): native code, not Python."""
    name = file.rsplit("/", 1)[-1]
    return name.endswith(NATIVE) or ".so." in name


class Source(str, Enum):
    """Where a record came from. Earlier members win when two sources say different things about a field."""
    WORKER_SERVER = "worker_server"        # live: torch's worker server (stacks, flight recorder) in the rank
    PY_SPY = "py_spy"                      # live: `py-spy dump --locals` from outside
    FAULTHANDLER = "faulthandler"          # live: SIGUSR1 -> stacks/rank<R>.txt
    FLIGHT_RECORDER = "flight_recorder"    # a dump (at exit, on SIGTERM, torch's dump on timeout)
    SIGTERM_STACK = "sigterm_stack"        # stacks/sigterm/rank<R>.txt: where it stood when the launcher stopped it
    ERROR_FILE = "error_file"              # torch's error.json (@record)
    RANK_LOG = "rank_log"                  # the rank's stderr.log (its traceback, faulthandler's fatal dump)
    AGENT_LOG = "agent_log"                # torchrun's failure table, closing signals
    PROCESS = "process"                    # /proc: state, pid
    OTHER_NODE = "other_node"              # another node's watchdog, through the shared run dir


@dataclass(frozen=True)
class Frame:
    """One frame of a stack. ``locals``: what py-spy's --locals shows (name -> repr), else empty."""
    file: str
    line: int
    function: str
    locals: tuple[tuple[str, str], ...] = ()

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def library(self) -> bool:
        return is_library(self.file)

    def local(self, name: str) -> str | None:
        return next((v for k, v in self.locals if k == name), None)

    def to_json(self) -> dict:
        return {"where": self.where, "function": self.function}


def user_frame(frames: tuple[Frame, ...] | list[Frame]) -> Frame | None:
    """THE innermost frame of the user's own code (frames innermost first); None when every frame is a
    library's (a stack of the bootstrap alone says nothing about the user's script)."""
    return next((f for f in frames if not f.library), None)


@dataclass(frozen=True)
class Group:
    """A process group as one rank knows it. ``local_id`` (pg_id) is that rank's own numbering: with
    `new_group([0, 1])` and `new_group([2, 3])`, pg_id 1 is group "1" on rank 0 and "2" on rank 2. Groups are
    matched across ranks by ``key``, their name (``process_group[0]`` of a flight-recorder entry: the same on
    every member, as torch's fr_trace matches them); ``ranks`` are its members where a record says."""
    name: str
    ranks: tuple[int, ...] | None = None
    local_id: str | None = None
    desc: str | None = None

    @property
    def key(self) -> str:
        return self.name


DEFAULT_GROUP = Group(name="0", desc="default_pg")


@dataclass(frozen=True)
class Call:
    """One collective (or point-to-point op) a rank entered, as its flight record or stack shows it."""
    group: Group
    op: str
    seq: int | None = None                       # collective_seq_id in the group (None: p2p, or unknown)
    peer: int | None = None                      # send/recv: the other end (global rank)
    input_sizes: tuple = ()
    output_sizes: tuple = ()
    dtypes: tuple[str, ...] = ()
    splits: tuple | None = None                  # all_to_all's input splits, where recorded
    completed: bool | None = None                # None: unknown
    site: Frame | None = None                    # the user's call site (the entry's frames, else the stack)
    created_ns: int | None = None
    timeout_ms: int | None = None
    seq_from_stack: bool = False                 # ``seq`` stands in for "the collective the stacks show" (attach)
    state: str | None = None                     # the record's "started" / "scheduled" (NCCL: its kernel ran or
    #                                              not yet) or "completed"; None where it does not say

    @property
    def all_to_all(self) -> bool:
        """An all_to_all (torch's and NCCL's spellings): its parts may differ by rank."""
        return "all_to_all" in self.op or "alltoall" in self.op

    @property
    def numbered(self) -> bool:
        """A sequence id a record gave, worth showing ("all_reduce #7")."""
        return self.seq is not None and not self.seq_from_stack

    def signature(self) -> tuple:
        """What must agree across the ranks of one collective: op, sizes, dtypes, splits. An all_to_all's sizes
        may differ by rank (a router's uneven splits): its splits are compared pairwise instead (judge/sizes.py)."""
        if self.all_to_all:
            return (self.op, self.dtypes)
        return (self.op, self.input_sizes, self.dtypes, self.splits)


class WaitKind(str, Enum):
    COLLECTIVE = "collective"
    SEND = "send"
    RECV = "recv"
    INIT = "init_process_group"
    STORE = "store"
    BARRIER = "barrier"        # a store-based barrier (not the collective barrier: that is COLLECTIVE)
    P2P = "p2p"                # a batch of sends and receives (pipelining's P2POp batch): peers as for SEND/RECV
    NONE = "none"              # running its own code
    UNKNOWN = "unknown"        # no source says


P2P_WAITS = frozenset({WaitKind.SEND, WaitKind.RECV, WaitKind.P2P})  # waits for a peer, not a group


@dataclass(frozen=True)
class LibraryWait:
    """A wait a library makes on the user's behalf (``evidence.library_waits``: the table of frames -> waits):
    ``library`` "DDP", ``op`` "all_reduce", ``phrase`` "DDP's gradient all_reduce inside loss.backward()".
    ``certain`` False: the frames fit the wait but also the library's own compute (the autograd engine without
    native frames; ``unless`` says what else it may be); ``driver``: who drives it ("Lightning", "Accelerate")."""
    library: str
    op: str
    phrase: str
    kind: WaitKind = WaitKind.COLLECTIVE
    certain: bool = True
    driver: str | None = None
    unless: str | None = None

    @property
    def said(self) -> str:
        """The phrase as a verdict says it: with what else it may be, while nothing confirms the wait."""
        return self.phrase if self.certain or not self.unless else f"{self.phrase} (or {self.unless})"


@dataclass(frozen=True)
class Wait:
    """What a rank waits in. ``peer``: the other end of a send/recv (global rank). ``awaited``: the ranks a
    store or init wait is for, when its keys say (``keys``: the store keys as torch names them). ``library``:
    the library that made the wait for the user's code (DDP's Reducer inside backward, FSDP2's hooks, ...)."""
    kind: WaitKind
    call: Call | None = None
    peer: int | None = None
    awaited: tuple[int, ...] | None = None
    keys: tuple[str, ...] = ()
    site: Frame | None = None                    # where the user's code made the call
    library: LibraryWait | None = None


NOTHING = Wait(WaitKind.NONE)


class EndKind(str, Enum):
    RUNNING = "running"
    EXITED = "exited"          # with a code (0: returned or sys.exit(0))
    SIGNALLED = "signalled"
    EXCEPTION = "exception"
    STOPPED = "stopped"        # SIGSTOP, a debugger, D state
    GONE = "gone"              # vanished without the launcher noticing (zombie, dead)
    UNKNOWN = "unknown"


class Ender(str, Enum):
    """Who ended the rank, where a source says."""
    ITSELF = "itself"
    LAUNCHER = "launcher"      # torchrun's SIGTERM/SIGKILL after another rank failed
    BACKEND = "backend"        # gloo/NCCL aborted it (a mismatch it detected, a timeout it hit)
    PEER_LOSS = "peer_loss"    # its collective broke because a peer went away
    OUTSIDE = "outside"        # a signal nobody in the job sent (OOM killer, operator)
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Ending:
    kind: EndKind
    exit_code: int | None = None
    signal: str | None = None
    error_type: str | None = None
    message: str | None = None
    by: Ender = Ender.UNKNOWN
    timed_out: bool = False                      # its own wait hit the process-group/store timeout
    where: Frame | None = None
    at: float | None = None                      # epoch seconds, where a source says


STILL_RUNNING = Ending(EndKind.RUNNING)


@dataclass
class RankState:
    """One rank's state from one source, or merged from several (JobEvidence.add)."""
    rank: int
    source: Source
    host: str | None = None
    node: str | None = None
    pid: int | None = None
    local_rank: int | None = None
    frames: tuple[Frame, ...] = ()               # the main thread, innermost first
    wait: Wait | None = None                     # None: this source does not say
    ending: Ending | None = None                 # None: this source does not say
    calls: tuple[Call, ...] = ()                 # collectives entered, oldest first
    groups: tuple[Group, ...] = ()               # groups it belongs to (flight recorder's pg_config)
    recorded: bool = False                       # a flight recorder answered (an empty one: no collective yet)
    sources: tuple[Source, ...] = ()
    raw: dict = field(default_factory=dict)      # the source's own data for run.json (never read by the judge)

    @property
    def site(self) -> Frame | None:
        """Where the rank stands: its innermost user frame, else where its wait was called."""
        return user_frame(self.frames) or (self.wait.site if self.wait else None)

    def merged(self, other: RankState) -> RankState:
        """This record completed by ``other``'s (this one's non-empty fields win)."""
        def pick(a, b):
            return a if a not in (None, (), {}) else b
        return replace(
            self, host=pick(self.host, other.host), node=pick(self.node, other.node), pid=pick(self.pid, other.pid),
            local_rank=pick(self.local_rank, other.local_rank), frames=pick(self.frames, other.frames),
            wait=_better_wait(self.wait, other.wait), ending=_better_ending(self.ending, other.ending),
            calls=self.calls + tuple(c for c in other.calls if c not in self.calls),
            groups=pick(self.groups, other.groups),
            recorded=self.recorded or other.recorded,
            sources=tuple(dict.fromkeys(self.sources + (self.source,) + other.sources + (other.source,))),
            raw={**other.raw, **self.raw})


def _better_wait(a: Wait | None, b: Wait | None) -> Wait | None:
    if a is None or a.kind == WaitKind.UNKNOWN:
        return b or a
    if b is None:
        return a
    # the same wait from two sources: keep the one that knows more (the peer, the keys, the call)
    if a.kind == b.kind:
        return replace(a, call=a.call or b.call, peer=a.peer if a.peer is not None else b.peer,
                       awaited=a.awaited if a.awaited is not None else b.awaited, keys=a.keys or b.keys,
                       site=a.site or b.site, library=a.library or b.library)
    return a


def _better_ending(a: Ending | None, b: Ending | None) -> Ending | None:
    if a is None or a.kind == EndKind.UNKNOWN:
        return b or a
    if b is None or b.kind == EndKind.UNKNOWN:
        return a
    if a.kind == EndKind.RUNNING and b.kind != EndKind.RUNNING:
        return b  # a later source saw it end
    return replace(a, exit_code=a.exit_code if a.exit_code is not None else b.exit_code,
                   signal=a.signal or b.signal, error_type=a.error_type or b.error_type,
                   message=a.message or b.message, by=a.by if a.by != Ender.UNKNOWN else b.by,
                   timed_out=a.timed_out or b.timed_out, where=a.where or b.where, at=a.at or b.at)


@dataclass
class JobEvidence:
    """Every rank's state at one moment. ``live``: the ranks were running when it was taken (the watchdog,
    attach); else it is what a finished job left (postmortem): records may have been written after a timeout.
    ``world``: every rank of the job, when known (a rank with no record is missing evidence, not innocent).
    ``unread``: ranks of the world the reader never read (attach on one node: the other nodes' ranks; one py-spy
    could not read): nothing was asked of them, so no record of theirs says they never entered anything."""
    live: bool
    ranks: dict[int, RankState] = field(default_factory=dict)
    world: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list)
    unread: tuple[int, ...] = ()

    def add(self, state: RankState) -> None:
        """Merge one source's record of a rank into what is known (Source order decides a disagreement)."""
        have = self.ranks.get(state.rank)
        if have is None:
            self.ranks[state.rank] = replace(state, sources=tuple(dict.fromkeys(state.sources + (state.source,))))
            return
        order = list(Source)
        first, second = (have, state) if order.index(have.source) <= order.index(state.source) else (state, have)
        self.ranks[state.rank] = first.merged(second)

    def expected(self) -> list[int]:
        """Every rank of the job: the world, the ranks with a record, the members of every group a record names."""
        members = {r for s in self.ranks.values() for g in s.groups for r in g.ranks or ()}
        return sorted(set(self.world) | set(self.ranks) | members)


@dataclass
class RankFailure:
    """One rank's failure as its records tell it (torchrun's table, error.json, its log, a signal): what the
    post-mortem reads, classifies (judge.classify) and attributes (judge.attribution)."""
    rank: int | None
    local_rank: int | None
    host: str | None
    exit_code: int | None
    signal: str | None = None
    attempt: int = 0
    timestamp: float | None = None
    category: str = "unknown"
    error_type: str | None = None
    message: str | None = None
    location: str | None = None
    fix: str = ""
    traceback: str = ""
    log_tail: str = ""
    victim: bool = False
    reason: str = ""
    # Whether the verdict names this rank: True (a culprit, listed beside the root cause), False (shown but not
    # named: the rank gloo aborted on a mismatch, one side of a tie), None (undecided: a root cause is named).
    named: bool | None = None

    def to_json(self) -> dict:
        return asdict(self)
