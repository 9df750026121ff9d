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
probe listener at ``(addr, probe_port)``; the helpers re-exported here from check_helpers.py talk to it and
to the network with a time limit each (``time_exchange``, ``connect_probe``, ``lookup``,
``route_source_addr``), so a plugin measures what the built-in cluster checks measure, the same way. They
are thin wrappers over the engine's implementation (imported when called, so importing this stays cheap).
Comparing a value across nodes (``split``, ``majority``, the baseline's values) lives in majority.py and a
check's ``Option`` in options.py; plugins import all of them from here.

This module must stay light: no torch, no rich, no network at import.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, TypedDict, runtime_checkable

from . import __version__ as TOOL_VERSION  # noqa: F401 - public: the running ddpdoctor's version (parity)
from .redaction import REDACTED  # noqa: F401 - public: what a redacted value reads as

# Public too: comparing a value across nodes (majority.py) and the helpers for checks (check_helpers.py).
from .check_helpers import (best_sample, connect_fix, connect_probe, cuda_available, is_loopback,  # noqa: F401
                            launcher_variables, lookup, lookup_cap_s, measure_collective, nnodes_from_world, redact_env,
                            route_source_addr, time_exchange)
from .options import Option  # noqa: F401
from .numbers import parse_int  # noqa: F401 - public: the one parser for integers from outside
from .shared_libs import torch_damage  # noqa: F401 - public: a truncated library of torch's, found before importing it
from .shared_libs import import_error_words  # noqa: F401 - public: why an import failed, a refused one's damage said
from .majority import (BASELINE, NoMajority, Split, baseline_name, baseline_values, majority,  # noqa: F401
                       nodes_text, split)


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
    # The unattended prolog's stand-in for ``imports``: this check's ``kept_facts`` as the node's last health
    # check measured them in the same software environment (unattended/kept.py). Set: gather must not import
    # its ``imports`` and takes those facts from here instead. None: gather measures everything itself.
    kept: dict | None = None


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
    # True: the check runs in the cross-node meeting of a multi-node job's prologs (unattended/meet.py, site config
    # `cross_node = true`): a cluster check that sees what only the nodes together see (links, names, clocks), or a
    # local one whose comparables parity must compare across the job's nodes there (what breaks jobs: torch's
    # build, the packages). Only a cluster check's failing result in the meeting blames a node there; a local
    # one's is its node's own prolog's and health check's business.
    cross_node: bool = False
    # Heavy modules gather imports (e.g. "torch"): the runner imports them first on its own thread, because
    # two gather threads importing torch at once can see a half-initialised module or abort the process.
    imports: tuple[str, ...] = ()
    # Where a check with ``imports`` also measures what changes between two jobs (NVML's GPUs beside torch's
    # build): the keys of its facts that only the import tells and no job changes (torch's version, its CUDA).
    # The unattended prolog, which never imports torch, runs such a check live with these facts kept from the
    # node's health check (``ctx.kept``); a check with ``imports`` and no ``kept_facts`` is kept whole there.
    kept_facts: tuple[str, ...] = ()
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


def __getattr__(name: str) -> Any:
    """``LOOKUP_CAP_S``: seconds after which lookup() records a lookup as unanswered (its thread abandoned).
    One value, the engine's, read when asked: the engine imports nothing back from here."""
    if name == "LOOKUP_CAP_S":
        return lookup_cap_s()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
