"""The check API: everything a check plugin imports (Check, Level, Result, Option, Skip, NodeContext).

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
    parity check compares the union over all checks and names the node that differs from the majority;
    what may legitimately differ per node (ranks, hostnames, interface names) is simply left out here.
    A plugin takes part in the parity diff by returning its keys here.

Both receive the check's facts after redaction and must never raise on odd facts (a document written by
another version); missing facts give ``{}``. Readers tolerate their absence (documents written before
them): ``ddpdoctor.runner.node_exports`` derives them from the facts with the checks installed.

Options arrive typed and complete: the runner fills every declared ``Option``'s default and converts what
the config file and ``--set`` gave, so a check reads ``opts["warn_ms"]``, never restating a default. In a
test, ``check.with_defaults({"warn_ms": 5})`` builds the same mapping.

This module must stay light: no torch, no rich, no network.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping


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


@dataclass
class NodeContext:
    """What ``gather`` knows about where it runs.

    ``run`` holds run-wide settings every node shares (nnodes, gpus_per_node, master, ...).
    ``cluster`` is None on a single-node run; in a cluster run it gives network-phase checks what they
    need from the other nodes (peers' probe addresses, the master's time echo, the shared nonce...).
    """

    node: str
    rank: int = 0
    nnodes: int = 1
    run: dict = field(default_factory=dict)
    opts: dict = field(default_factory=dict)  # this check's resolved options
    cluster: Any = None
    deadline: float | None = None  # time.monotonic() value by which gather should return


# The vocabulary of ``Check.exports``: key -> the shape of its value and who provides it among the built-ins.
# A reader merges one key across checks: dicts key by key (the first non-empty value in check-name order),
# lists concatenated, anything else the first check's. Every field may be missing or None.
EXPORTS: dict[str, str] = {
    "interface": '{"name", "addr", "mtu"}: the interface this node reaches the master through (names)',
    "links": '[{"peer", "ok", "rtt_ms", "error_class"}]: TCP links probed from this node to peers (mesh)',
    "clock": '{"offset_ms", "bound_ms"}: this node\'s clock minus the master\'s and its error bound; '
             'offset_ms None: no sample (clock-skew)',
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

    def gather(self, ctx: NodeContext) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

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


def majority(values_by_node: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The most common value and the nodes whose value differs from it (ties: the smallest value's repr)."""
    counts: dict[str, tuple[int, Any]] = {}
    for value in values_by_node.values():
        key = repr(value)
        n, _ = counts.get(key, (0, value))
        counts[key] = (n + 1, value)
    if not counts:
        return None, []
    best_key = sorted(counts, key=lambda k: (-counts[k][0], k))[0]
    best = counts[best_key][1]
    odd = sorted(n for n, v in values_by_node.items() if repr(v) != best_key)
    return best, odd


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
             ignore_missing: bool = True) -> list[Result]:
    """Nodes whose value differs from the majority, one result each: ``judge(node, value, majority_value)``.
    ``ignore_missing``: nodes whose value is None take no part (they did not measure it)."""
    values = {n: v for n, v in values_by_node.items() if v is not None or not ignore_missing}
    common, odd = majority(values)
    return [judge(n, values[n], common) for n in odd]
