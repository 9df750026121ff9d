"""The check API: everything a check plugin imports (Check, Level, Result, Option, Skip, NodeContext, helpers).

A check is two functions. ``gather(ctx)`` runs on every node and returns JSON-serialisable facts about
that node. ``compare(facts_by_node, opts)`` is pure: it turns the facts of one or many nodes (a dict
``{node_name: facts}``) into results, so it is tested with plain dicts and no hardware.

The contract: what the rest of the tool may know about a check
--------------------------------------------------------------
Facts are the check's own business: their shape may change with the check. What the report, the advice,
the run-trainer gate, the cluster protocol and the parity check read is declared by two more pure methods,
computed by the runner on the node right after ``gather`` (so every saved document carries them, as
``nodes[NODE]["exports"][CHECK]`` and ``nodes[NODE]["comparable"][CHECK]``):

``exports(facts) -> dict``
    What this node's facts mean for the rest of the tool, in the vocabulary of ``EXPORTS`` below (the
    interface to the master, the links probed, the clock offset, versions, GPUs, cells for the report's
    per-node table). A key outside the vocabulary is kept and shown with the node's details.
``comparable(facts) -> dict[str, Any]``
    Flat ``key -> value`` pairs that must be equal on every node (values: JSON scalars or lists). The
    parity check compares the union over all checks and names the node that differs from the majority, or
    from a known-good run's value (``--baseline``; ``split`` below); with no majority (two nodes, a tie)
    it names every side and picks none. What may legitimately differ per node (ranks, hostnames, interface
    names) is simply left out here; what agrees within one run but changes from run to run (a job id, the
    master's address) is declared in ``per_run_keys`` and never compared with a baseline.
    A plugin takes part in the parity diff by returning its keys here.

Both receive the check's facts after redaction and must never raise on odd facts (a document written by
another version); missing facts give ``{}``. Readers tolerate their absence (documents written before
them): ``ddpdoctor.exports.node_exports`` derives them from the facts with the checks installed.

Options arrive typed and complete: the runner fills every declared ``Option``'s default and converts what
the config file and ``--set`` gave, so a check reads ``opts["warn_ms"]``, never restating a default. In a
test, ``check.with_defaults({"warn_ms": 5})`` builds the same mapping.

Cluster checks
--------------
A check with ``phase = "cluster"`` (or ``"collective"``) finds the other nodes in ``ctx.cluster``, a
``ClusterContext``: the roster (``nodes``, each a ``RosterNode`` dict with name, rank, host, addr and
probe_port), this node (``me``), the master, the peers to probe, the process-group store. Every node runs a
probe listener at ``(addr, probe_port)``; the helpers at the end of this module talk to it and to the
network with a time limit each (``time_exchange``, ``connect_probe``, ``lookup``, ``route_source_addr``),
so a plugin measures what the built-in cluster checks measure, the same way. They are thin wrappers over
the engine's implementation (imported when called, so importing this module stays cheap).

This module must stay light: no torch, no rich, no network at import.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, TypedDict, runtime_checkable

from . import __version__ as TOOL_VERSION  # noqa: F401 - public: the running ddpdoctor's version (parity)
from .redact import REDACTED  # noqa: F401 - public: what a redacted value reads as

if TYPE_CHECKING:  # types of the helpers' results, for readers and type checkers only
    from .cluster.endpoint import PingResult
    from .cluster.probe import ClockSample


class Level(str, enum.Enum):
    """How bad a result is. Worst wins: FAIL > WARN > SKIP > PASS."""

    PASS = "pass"
    SKIP = "skip"
    WARN = "warn"
    FAIL = "fail"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @classmethod
    def worst(cls, levels: Iterable["Level"]) -> "Level":
        return max(levels, key=lambda lv: lv.severity, default=cls.PASS)


_SEVERITY = {Level.PASS: 0, Level.SKIP: 1, Level.WARN: 2, Level.FAIL: 3}


@dataclass
class Result:
    """One finding. ``nodes`` names the node(s) it concerns; ``fix`` is something a user can paste or do."""

    check: str
    level: Level
    summary: str
    nodes: list[str] = field(default_factory=list)
    actual: Any = None
    expected: Any = None
    fix: str = ""
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "check": self.check,
            "level": self.level.value,
            "summary": self.summary,
            "nodes": list(self.nodes),
            "actual": self.actual,
            "expected": self.expected,
            "fix": self.fix,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> "Result":
        return cls(
            check=data["check"],
            level=Level(data["level"]),
            summary=data["summary"],
            nodes=list(data.get("nodes") or []),
            actual=data.get("actual"),
            expected=data.get("expected"),
            fix=data.get("fix") or "",
            details=dict(data.get("details") or {}),
        )


class Skip(Exception):
    """Raised by ``gather`` when the check cannot apply on this node; the message says why."""


@dataclass(frozen=True)
class Option:
    """A threshold or setting of a check. Settable in ddpdoctor.toml ([checks.NAME] key = value)
    and on the command line (``--set NAME.key=value``).

    Numbers are finite and within [min, max] (default 0 .. 1e9: no check's threshold is negative, and a
    larger one is a typo); an int option takes no bool and no fraction; TOML values keep their own type
    (``timeout = "soon"`` is an error, not a string), while ``--set`` strings are parsed."""

    default: Any
    help: str
    type: Callable[[Any], Any] | None = None  # converter; defaults to type(default)
    min: float | None = 0
    max: float | None = 1e9

    def convert(self, value: Any) -> Any:
        conv = self.type or (type(self.default) if self.default is not None else None)
        if conv is None or value is None:
            return value
        if conv is bool:
            return _to_bool(value)
        if conv in (int, float):
            return self._bounded(_to_number(value, conv))
        if conv is str and not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return conv(value)

    def _bounded(self, number: float) -> float:
        if self.min is not None and number < self.min:
            raise ValueError(f"{number!r} is below the minimum {self.min:g}")
        if self.max is not None and number > self.max:
            raise ValueError(f"{number!r} is above the maximum {self.max:g}")
        return number


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
    raise ValueError(f"expected true/false, got {value!r}")


def _to_number(value: Any, conv: type) -> int | float:
    """int or float from a TOML number or a --set string; bool is not a number here (True would be 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):  # NaN compares false with every bound
        raise ValueError(f"expected a finite number, got {value!r}")
    if conv is int:
        if number != int(number):
            raise ValueError(f"expected a whole number, got {value!r}")
        return int(number)
    return float(number)


class RosterNode(TypedDict, total=False):
    """One node of a cluster run as the roster names it (a plain dict: ``node["addr"]``). Every node that
    joined has all of these; ``launch`` and ``checks`` are what that node was started with."""

    name: str  # the node's name in results ("node0", or its host name)
    rank: int  # its node rank (the launcher's, or the order it joined in)
    claim: str  # the token it claimed its rank with (two nodes claiming one rank are told apart by it)
    host: str  # socket.gethostname() on that node
    fqdn: str  # socket.getfqdn() on that node
    addr: str  # the address it advertises: its probe listener's, the one its peers should reach it at
    probe_port: int  # its probe listener's TCP port (answers "P\n" and the time echo, see time_exchange)
    pid: int
    boot_id: str
    tool_version: str  # the ddpdoctor version it runs
    launcher: str | None  # the launcher it detected (torchrun, slurm, ...)
    fresh: bool
    launch: dict  # {"nnodes", "nproc_per_node", "rdzv_id", "endpoint"} as that node was told
    checks: list[str]  # the checks it runs


class RunBudget(Protocol):
    """The run's one deadline, as a cluster context hands it to the collective phase."""

    def collective_limit(self, wanted_s: float) -> float:
        """A process group's timeout: ``wanted_s`` capped by what the run has left (0 when nothing is)."""
        ...


@runtime_checkable
class ClusterContext(Protocol):
    """``NodeContext.cluster`` in a cluster run: what a cluster or collective check sees of the other nodes.

    Read-only for checks. ``nodes`` holds every node that joined, in rank order (``me`` and ``master`` among
    them); a node that never joined is not there (the verdict names it). ``peers_to_probe()`` is the other
    nodes up to 64, ring neighbours plus 8 random peers above (the probe fan-out a check should keep to:
    every node probing every other one is N^2 connections).
    """

    me: RosterNode  # this node
    nodes: list[RosterNode]  # every node that joined, in rank order
    master: RosterNode  # the master (node rank 0)
    endpoint: str  # the rendezvous endpoint as given (HOST:PORT)
    timeout: float  # the run's --timeout, seconds
    shared_dir: str | None  # --shared-dir, when given
    code_dir: str | None  # --code-dir, when given
    world_rank: int  # this node's index in ``nodes`` (its rank in a process group of one process per node)
    # backend ("gloo", "nccl") -> the torch.distributed store a process group of the nodes meets in:
    # ``dist.init_process_group(backend, store=ctx.cluster.pg_store(backend), rank=world_rank, ...)``.
    pg_store: Callable[[str], Any] | None
    budget: RunBudget | None  # the run's deadline; a collective takes its timeout from budget.collective_limit

    @property
    def world_size(self) -> int:
        """How many nodes joined (len(nodes))."""
        ...

    def peers_to_probe(self, seed: int = 0) -> list[RosterNode]:
        """The other nodes this node should probe (all of them up to 64 nodes)."""
        ...


@dataclass
class NodeContext:
    """What ``gather`` knows about where it runs.

    ``run`` holds run-wide settings every node shares (nnodes, gpus_per_node, master, ...).
    ``cluster`` is None on a single-node run; in a cluster run (phases "cluster" and "collective") it is a
    ``ClusterContext``: the other nodes, their probe listeners, the process-group store.
    """

    node: str
    rank: int = 0
    nnodes: int = 1
    run: dict = field(default_factory=dict)
    opts: dict = field(default_factory=dict)  # this check's resolved options
    cluster: ClusterContext | None = None
    deadline: float | None = None  # time.monotonic() value by which gather should return


# The vocabulary of ``Check.exports``: key -> the shape of its value and who provides it among the built-ins.
# A reader merges one key across checks: dicts key by key (the first non-empty value in check-name order),
# lists concatenated, anything else the first check's. Every field may be missing or None.
EXPORTS: dict[str, str] = {
    "interface": '{"name", "addr", "mtu"}: the interface this node reaches the master through (names)',
    "links": '[{"peer", "ok", "rtt_ms", "error_class"}]: TCP links probed from this node to peers (mesh)',
    "clock": '{"offset_ms", "bound_ms", "limit_ms"}: this node\'s clock minus the master\'s, its error bound and '
             'the |offset| above which the check warns; offset_ms None: no sample (clock-skew)',
    "versions": '{"python", "torch", "cuda", "nccl", "driver"}: version strings (torch-build, gpu)',
    "gpus": '{"count", "models": {model: n}, "lost"}: GPUs NVML lists, working ones by model (gpu)',
    "summary": '{column: text}: short per-node cells for the report\'s per-node table (any check, plugins too)',
}


class Check:
    """Base class for checks. Subclass, set ``name``/``description``, implement ``gather``/``compare``.

    phase:
      "local"      gather needs nothing but this node (runs first, in parallel, with a deadline);
      "cluster"    gather talks to other nodes through ``ctx.cluster`` (runs once the nodes have met);
      "collective" gather runs a torch.distributed collective (runs last, only if the links passed).
    """

    name: str = ""
    description: str = ""
    phase: str = "local"
    options: Mapping[str, Option] = {}
    timeout_s: float = 30.0
    # Other checks whose facts this check's compare reads (gpu-health reads "gpu"): they arrive in compare as
    # facts_by_node[node]["uses"][name] (where that check gathered on the node); a check never gathers the
    # same facts twice. A used check of the same phase is selected with this one unless --skip names it.
    uses: tuple[str, ...] = ()
    # True: compare also receives facts_by_node[node]["comparable"] = {check: {key: value}}, every check's
    # comparables on that node (the parity check).
    reads_comparables: bool = False
    # Heavy modules gather imports (e.g. "torch"): the runner imports them first on its own thread, because
    # two gather threads importing torch at once can see a half-initialised module or abort the process.
    imports: tuple[str, ...] = ()
    # Keys of ``comparable`` that agree across the nodes of one run but belong to that run (a job id, the
    # master's address, the checks selected): fnmatch patterns ("SLURM_*"). A --baseline from another run
    # is never compared on them.
    per_run_keys: tuple[str, ...] = ()
    # A cluster check that needs the master to publish something every node answers (a nonce to read back,
    # a file name): the master runs ``publish`` before any node gathers; each node's gather finds the value
    # in ``ctx.cluster.published.get(self.name)`` (absent: it never came) and answers in its facts; compare
    # judges the answers. See checks/PLUGINS.md and ddpdoctor/cluster/PROTOCOL.md ("exchange").
    publishes: bool = False
    # An opt-in measurement (slow, or loading the machine): the group of preflight flag that turns it on
    # ("perf": `preflight --perf`). Such a check declares a boolean Option "enabled" (default False), skips
    # while it is off, and the flag sets it for every installed check of that group, plugins included.
    opt_in: str = ""
    # The shape of this check's facts, as plain data, checked when a document is read (documents.validate), so a
    # hand-edited or damaged file is one line naming the key, not an error deep in exports(): a dict is an
    # object whose listed keys, when present and not null, have the given shapes; [X] a list of X; "number",
    # "text", "scalar", "any" or "object", with a trailing "?" when null is allowed too. None: not checked.
    facts_shape: Any = None

    def gather(self, ctx: NodeContext) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

    def publish(self, ctx: NodeContext) -> dict | None:
        """On the master only (checks with ``publishes``): a small JSON object for every node's gather, or
        None to publish nothing. Something to undo at the end goes to ``ctx.cluster.on_close(fn)`` (it runs
        however the run ends, SIGTERM included). A raise or an overrun publishes {"error": why}."""
        return None

    def compare(self, facts_by_node: Mapping[str, dict], opts: Mapping[str, Any]) -> list[Result]:  # pragma: no cover
        raise NotImplementedError

    # ---- the contract (see the module docstring) --------------------------------------------------------
    def exports(self, facts: dict) -> dict:
        """What this node's facts mean for the rest of the tool, keys from ``EXPORTS``. Pure; never raises."""
        return {}

    def comparable(self, facts: dict) -> dict[str, Any]:
        """Flat key -> value pairs that must agree across nodes (the parity check compares them). Pure."""
        return {}

    def with_defaults(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``given`` (options and run settings) completed with every declared option's default, the declared
        options converted to their type: what ``gather`` (ctx.opts) and ``compare`` (opts) receive."""
        out = dict(given or {})
        for key, option in self.options.items():
            out[key] = option.convert(out[key]) if key in out else option.default
        return out

    # Helpers for the common shapes of results, so every check reads the same.
    def result(self, level: Level, summary: str, nodes: Iterable[str] = (), **kw: Any) -> Result:
        return Result(check=self.name, level=level, summary=summary, nodes=list(nodes), **kw)

    def passed(self, summary: str, nodes: Iterable[str] = (), **kw: Any) -> Result:
        return self.result(Level.PASS, summary, nodes, **kw)

    def warn(self, summary: str, nodes: Iterable[str] = (), **kw: Any) -> Result:
        return self.result(Level.WARN, summary, nodes, **kw)

    def fail(self, summary: str, nodes: Iterable[str] = (), **kw: Any) -> Result:
        return self.result(Level.FAIL, summary, nodes, **kw)

    def skip(self, summary: str, nodes: Iterable[str] = (), **kw: Any) -> Result:
        return self.result(Level.SKIP, summary, nodes, **kw)


def per_node(
    facts_by_node: Mapping[str, dict], judge: Callable[[str, dict], Iterable[Result]]
) -> list[Result]:
    """Run a single-node judgement on every node: the usual shape of a local check's ``compare``."""
    out: list[Result] = []
    for node in sorted(facts_by_node):
        out.extend(judge(node, facts_by_node[node]))
    return out


class NoMajority(str):
    """What ``odd_ones`` hands a judge as the common value when there is none (a caller without ``tie``):
    the text of every side, never one side's value, so no message or fix picks a side by accident."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Split:
    """How the nodes divide over one value, and which of them are odd (``split``).

    ``sides``: each distinct value with its nodes (sorted), the most nodes first, then by their first node.
    ``basis`` says what the odd nodes differ from, ``reference`` is that value (``accepted``: every value the
    reference allows):
      "baseline"  a known-good run's value (``--baseline``): a node is odd when its value is not accepted,
                  however many nodes share it (two nodes; a whole cluster that upgraded torch);
      "majority"  the value more nodes hold than any other value (all nodes, when they agree);
      ""          none: the nodes disagree and no value leads (two nodes; 2 against 2; 1, 1 and 1). ``odd``
                  then holds every node, and nothing may say, or fix, as if one side were right.
    """

    sides: tuple[tuple[Any, tuple[str, ...]], ...] = ()
    basis: str = ""
    reference: Any = None
    accepted: tuple = ()
    odd: tuple[str, ...] = ()

    @property
    def no_majority(self) -> bool:
        """The nodes disagree and nothing says which of them is right."""
        return self.basis == "" and bool(self.odd)

    def value_of(self, node: str) -> Any:
        return next((v for v, nodes in self.sides if node in nodes), None)

    def reference_text(self, show: Callable[[Any], str] = repr) -> str:
        if len(self.accepted) > 1:
            return "one of " + ", ".join(show(v) for v in self.accepted)
        return show(self.reference)

    def sides_text(self, show: Callable[[Any], str] = repr, only: Iterable[str] | None = None, limit: int = 6) -> str:
        """"'2.1.3' on node2; '2.4.6' on node1" (the nodes of ``only``, when given; at most ``limit`` sides)."""
        keep = set(only) if only is not None else None
        parts = []
        for value, nodes in self.sides:
            shown = [n for n in nodes if keep is None or n in keep]
            if shown:
                parts.append(f"{show(value)} on {nodes_text(shown)}")
        more = len(parts) - limit
        return "; ".join(parts[:limit]) + (f"; +{more} more value(s)" if more > 0 else "")


def nodes_text(nodes: Iterable[str], limit: int = 4) -> str:
    """"a, b, c" or "a, b, c, d (+60 more nodes)": node names for a message (a result's ``nodes`` has them all)."""
    nodes = list(nodes)
    if len(nodes) <= limit:
        return ", ".join(nodes)
    return f"{', '.join(nodes[:limit])} (+{len(nodes) - limit} more nodes)"


def split(values_by_node: Mapping[str, Any], baseline: Iterable[Any] | None = None) -> Split:
    """The nodes' values grouped, and the odd nodes: those not among ``baseline`` (the accepted values of a
    known-good run) when it is given and not empty, else those not holding the value most nodes hold. With
    no value held by more nodes than every other (a tie: two nodes that differ, 2 against 2) there is no
    majority: ``basis`` is "" and every node is odd (see ``Split``). Values are compared by repr (lists too)."""
    groups: dict[str, tuple[Any, list[str]]] = {}
    for node in sorted(values_by_node):
        value = values_by_node[node]
        groups.setdefault(repr(value), (value, []))[1].append(node)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1][1]), kv[1][1][0]))  # then in node order
    sides = tuple((value, tuple(nodes)) for _, (value, nodes) in ordered)
    accepted = tuple(baseline) if baseline is not None else ()
    if accepted:
        allowed = {repr(v) for v in accepted}
        odd = tuple(sorted(n for key, (_, nodes) in groups.items() if key not in allowed for n in nodes))
        return Split(sides, "baseline", accepted[0], accepted, odd)
    if not sides:
        return Split()
    if len(sides) == 1 or len(sides[0][1]) > len(sides[1][1]):
        common = sides[0][0]
        odd = tuple(sorted(n for _, nodes in sides[1:] for n in nodes))
        return Split(sides, "majority", common, (common,), odd)
    return Split(sides, "", None, (), tuple(sorted(values_by_node)))


def majority(values_by_node: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The value most nodes hold and the nodes whose value differs from it. On a tie there is no majority:
    ``(None, every node)`` (``split`` says more: the sides and their values)."""
    s = split(values_by_node)
    return s.reference, list(s.odd)


def is_quiet(results: Iterable[Result]) -> bool:
    """No warning and no failure among these results."""
    return not any(r.level in (Level.WARN, Level.FAIL) for r in results)


def passed_if_quiet(results: list[Result], check: Check, nodes: Iterable[str],
                    summary: str | Callable[[], str], **kw: Any) -> list[Result]:
    """``results`` plus one pass result when none of them warned or failed: the usual end of a judgement.
    ``summary`` may be a function, called only for the pass (its figures may not exist otherwise)."""
    if is_quiet(results):
        results.append(check.passed(summary() if callable(summary) else summary, nodes, **kw))
    return results


def odd_ones(values_by_node: Mapping[str, Any], judge: Callable[[str, Any, Any], Result],
             ignore_missing: bool = True, *, baseline: Iterable[Any] | None = None,
             tie: Callable[[Split], Iterable[Result]] | None = None) -> list[Result]:
    """Nodes whose value differs from the majority (or from ``baseline``, the accepted values of a known-good
    run, when given), one result each: ``judge(node, value, reference)``. On a tie there is no majority:
    ``tie(split)`` words it (one result naming every side, its fix picking none); without ``tie`` the judge
    is called for every node with a ``NoMajority`` text of all the sides as the reference.
    ``ignore_missing``: nodes whose value is None take no part (they did not measure it)."""
    values = {n: v for n, v in values_by_node.items() if v is not None or not ignore_missing}
    s = split(values, baseline)
    if s.no_majority:
        if tie is not None:
            return list(tie(s))
        return [judge(n, values[n], NoMajority(f"no majority ({s.sides_text()})")) for n in s.odd]
    return [judge(n, values[n], s.reference) for n in s.odd]


# The run setting (so: every compare's ``opts``) that holds a known-good run's values (preflight --baseline;
# ddpdoctor/baseline.py): {"file", "nodes", "verdict", "comparable": {check: {key: [accepted values]}}}.
BASELINE = "baseline"


def baseline_values(opts: Mapping[str, Any], check: str, key: str, missing: Any = None) -> list[Any] | None:
    """The values the baseline in a compare's ``opts`` accepts for ``check``'s comparable ``key``; None when
    there is no baseline or it says nothing of that key (compare with the majority then). A key the
    baseline's check had on none of its nodes is accepted as ``missing`` when the caller has such a value
    (a package the known-good run did not have)."""
    ref = opts.get(BASELINE) if isinstance(opts, Mapping) else None
    if not isinstance(ref, Mapping) or not isinstance(ref.get("comparable"), Mapping):
        return None
    values = ref["comparable"].get(check)
    if not isinstance(values, Mapping):
        return None
    if isinstance(values.get(key), list) and values[key]:
        return list(values[key])
    return [missing] if missing is not None else None


def baseline_name(opts: Mapping[str, Any]) -> str | None:
    """"the baseline FILE" for a message, or None when the run has no baseline."""
    ref = opts.get(BASELINE) if isinstance(opts, Mapping) else None
    return f"the baseline {ref.get('file')}" if isinstance(ref, Mapping) else None


# ---- helpers for checks ---------------------------------------------------------------------------------
# Thin wrappers over the engine's own implementation, imported when called (the engine may move its
# modules; these names and signatures are what plugins rely on). Every network call has a time limit.

def __getattr__(name: str) -> Any:
    """``LOOKUP_CAP_S``: seconds after which lookup() records a lookup as unanswered (its thread abandoned).
    One value, the engine's (cluster/endpoint.py), read when asked: the engine imports nothing back from here."""
    if name == "LOOKUP_CAP_S":
        from .cluster.endpoint import LOOKUP_CAP_S

        return LOOKUP_CAP_S
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def time_exchange(host: str, port: int, samples: int = 8, timeout: float = 2.0) -> list["ClockSample"]:
    """NTP-style time samples against a node's probe listener (``node["addr"], node["probe_port"]``): each
    ``ClockSample`` has ``offset_ms`` (that node's clock minus this one's) and ``rtt_ms``; the offset's error
    bound is rtt / 2. One TCP connection, ``timeout`` seconds per step; raises OSError when it fails."""
    from .cluster.probe import time_exchange as exchange

    return exchange(host, port, samples, timeout=timeout)


def best_sample(samples: list["ClockSample"]) -> "ClockSample | None":
    """The sample with the smallest round trip (the tightest bound on its offset); None for no samples."""
    from .cluster.probe import best_sample as best

    return best(samples)


def connect_probe(host: str, port: int, timeout: float, source: str | None = None,
                  payload: bytes | None = b"P\n") -> "PingResult":
    """One TCP connect to ``host:port`` (a node's probe listener answers ``payload`` "P\\n" with "P\\n"),
    from the local address ``source`` when given; never raises. The ``PingResult`` has ``ok``, ``rtt_ms``,
    ``error_class`` (one of "refused", "timed out", "unreachable", "dns"; see ``connect_fix``) and
    ``message``. ``payload=None``: connect only."""
    from .cluster.endpoint import ping

    return ping(host, port, timeout, source=source, payload=payload)


def connect_fix(error_class: str | None) -> str:
    """What to do about a failed connect of that class (``PingResult.error_class``): a sentence with a
    command to paste; "" for an unknown class."""
    from .cluster.endpoint import FIXES

    return FIXES.get(error_class or "", "")


def lookup(kind: str, query: str, cap_s: float | None = None) -> dict:
    """A forward (``kind="forward"``: name -> sorted addresses) or reverse (``"reverse"``: address -> name)
    lookup, timed and bounded by ``cap_s`` (the resolver has no timeout of its own: the call runs on a
    daemon thread abandoned at the cap, ``LOOKUP_CAP_S`` by default). Returns ``{"kind", "query", "answer",
    "error", "seconds"}``."""
    from .cluster.endpoint import LOOKUP_CAP_S, lookup as bounded_lookup

    return bounded_lookup(kind, query, LOOKUP_CAP_S if cap_s is None else cap_s)


def is_loopback(addr: str) -> bool:
    """The address is a loopback address (127.x, ::1); False for anything that is not an IP address."""
    from .cluster.endpoint import is_loopback as loopback

    return loopback(addr)


def route_source_addr(host: str) -> str | None:
    """The local address the kernel would use to reach ``host`` (so: which interface routes there); sends
    nothing. None when there is no route."""
    from .cluster.endpoint import source_addr_towards

    return source_addr_towards(host)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as safe to publish: secret names (TOKEN, KEY, PASSWORD, ...) and
    secret-looking values become ``REDACTED``. Facts are redacted again before they leave the node; a check
    that shows env values in a message redacts them itself."""
    from .redact import redact_env as redact

    return redact(dict(env))


def nnodes_from_world(env: Mapping[str, str]) -> int | None:
    """The node count a torchrun-style environment implies (WORLD_SIZE // LOCAL_WORLD_SIZE), or None."""
    from .cluster.launcher_env import nnodes_from_world as nnodes

    return nnodes(env)


def cuda_available() -> bool:
    """torch imports and sees at least one usable CUDA device; never raises. Costs a torch import."""
    from .devices import cuda_available as available

    return available()


def measure_collective(op: str, nbytes: int, device: Any, *, backend: str, timeout_s: float,
                       warmup: int = 1, iters: int = 3, check: bool = True, group: Any = None) -> dict | None:
    """Time one collective the way ``ddpdoctor nccl-bench`` does (same checking, timing and bus-bandwidth
    definition), inside a process group this process has already joined (``torch.distributed``).
    ``op``: "all_reduce", "all_gather", "reduce_scatter", "broadcast", ... (nccl-bench's ``--ops``);
    ``device``: a torch.device. Every rank must call it with the same arguments. Returns the row as a dict:
    ``{"op", "size", "count", ..., "out_of_place": FIGURES, "in_place": FIGURES}`` where FIGURES is
    ``{"time_us", "time_us_max", "algbw_gbs", "busbw_gbs", "wrong"}`` (``wrong``: elements that came out
    wrong, summed over ranks); None when the op does not apply (too few ranks, a size of 0 elements)."""
    from dataclasses import asdict

    from .bench.harness import BenchConfig, Context, measure

    cfg = BenchConfig(ops=[op], sizes=[nbytes], warmup=warmup, iters=iters, check=check, backend=backend,
                      timeout_s=timeout_s)
    row = measure(op, nbytes, Context(device, group), cfg)
    return asdict(row) if row is not None else None
