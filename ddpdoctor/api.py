"""The check API: everything a check plugin imports (Check, Level, Result, Option, Skip, NodeContext).

A check is two functions. ``gather(ctx)`` runs on every node and returns JSON-serialisable facts about
that node. ``compare(facts_by_node, opts)`` is pure: it turns the facts of one or many nodes (a dict
``{node_name: facts}``) into results, so it is tested with plain dicts and no hardware.

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
    # Other checks whose facts this check's compare reads (e.g. parity reads "packages"): they arrive in
    # compare as facts_by_node[node]["uses"][name]; a check never gathers the same facts twice.
    uses: tuple[str, ...] = ()
    # Heavy modules gather imports (e.g. "torch"): the runner imports them first on its own thread, because
    # two gather threads importing torch at once can see a half-initialised module or abort the process.
    imports: tuple[str, ...] = ()

    def gather(self, ctx: NodeContext) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

    def compare(self, facts_by_node: Mapping[str, dict], opts: Mapping[str, Any]) -> list[Result]:  # pragma: no cover
        raise NotImplementedError

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
