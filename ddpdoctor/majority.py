"""Comparing one value across nodes: the sides it splits the nodes into, the majority (none on a tie: two
nodes, 2 against 2), and a known-good run's accepted values (``--baseline``). Pure; re-exported by
``ddpdoctor.api``, which is where plugins import it from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping


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
    known-good run) when it is given and not empty (when every node's value is accepted but the nodes hold
    different ones, the baseline cannot say which is right: judged as without it), else those not holding
    the value most nodes hold. With no value held by more nodes than every other (a tie: two nodes that
    differ, 2 against 2) there is no majority: ``basis`` is "" and every node is odd (see ``Split``). Values are compared by repr (lists too)."""
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
        # A baseline whose own nodes differed accepts each of their values; nodes that now differ among
        # themselves within those values still differ: that is judged as without a baseline, not passed.
        if odd or len(sides) < 2:
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
