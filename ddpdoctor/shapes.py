"""The shapes of ddpdoctor documents that readers rely on, checked once when a file is loaded.

The report reads nested keys (nodes -> facts -> mesh -> probes, rows -> in_place -> busbw_gbs, ...). A file
whose keys hold the wrong kind of value (hand-edited, another tool's, fuzzed) must be one line naming the
file and the key, exit 2, not a TypeError deep in the report (exit 4). Extra keys are allowed: newer
writers may add them. Only what a reader uses is described here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import UsageError

LEVELS = ("pass", "skip", "warn", "fail")


@dataclass(frozen=True)
class Obj:
    """A JSON object whose listed keys, when present, have the given shapes; ``required`` must be there."""

    keys: Mapping[str, Any]
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class ListOf:
    item: Any


@dataclass(frozen=True)
class MapOf:
    value: Any


@dataclass(frozen=True)
class Opt:
    """The shape, or null."""

    inner: Any


@dataclass(frozen=True)
class OneOf:
    values: tuple


NUMBER = "number"  # int or float, never bool (True is not 1); NaN allowed: a diverged loss is a real result
TEXT = "text"
ANY = "any"
SCALAR = "scalar"  # str, number, bool or null: usable as a dict key or sort key

OUTCOME = Opt(Obj({"busbw_gbs": Opt(NUMBER), "algbw_gbs": Opt(NUMBER), "time_us": Opt(NUMBER), "wrong": Opt(NUMBER)}))

FACTS = MapOf(Opt(Obj({})))
# A check's own facts are its business: their shape is declared by the check (``Check.facts_shape``, plain
# data read by ``from_spec``) and checked here for the installed checks, the ones whose contract may be
# derived from those facts (a document written before the contract). Nothing here names a check.
SPEC_NAMES = {"number": NUMBER, "text": TEXT, "scalar": SCALAR, "any": ANY, "object": Obj({})}


def from_spec(spec: Any) -> Any:
    """A declared facts shape as this module's shapes: a dict is an object whose listed keys, when present and
    not null, have the given shapes; ``[X]`` a list of X; "number", "text", "scalar", "any" or "object", with
    a trailing "?" when null is allowed too. A spec outside this grammar is a ValueError."""
    if isinstance(spec, dict):
        return Obj({str(k): Opt(from_spec(v)) for k, v in spec.items()})
    if isinstance(spec, list) and len(spec) == 1:
        return ListOf(from_spec(spec[0]))
    if isinstance(spec, str) and spec.rstrip("?") in SPEC_NAMES:
        inner = SPEC_NAMES[spec.rstrip("?")]
        return Opt(inner) if spec.endswith("?") else inner
    raise ValueError(f"not a facts shape: {spec!r}")


COMMON = {"schema": TEXT, "schema_version": NUMBER, "kind": TEXT, "run_id": Opt(TEXT), "created": Opt(SCALAR),
          "tool_version": Opt(SCALAR), "verdict": OneOf(LEVELS), "exit_code": Opt(NUMBER)}

BODIES = {
    "preflight": Obj({
        "scope": Opt(TEXT),
        "run": Opt(Obj({})),
        "checks": Opt(ListOf(Obj({}))),
        "nodes": MapOf(Obj({"host": Opt(SCALAR), "addr": Opt(SCALAR), "facts": Opt(FACTS),
                            "comparable": Opt(MapOf(Obj({})))})),  # --baseline reads it
        "results": ListOf(Obj({"check": TEXT, "level": OneOf(LEVELS), "summary": TEXT, "nodes": Opt(ListOf(TEXT)),
                               "fix": Opt(TEXT), "details": Opt(Obj({}))}, required=("check", "level", "summary"))),
        "advice": Opt(ListOf(ANY)),
        "timings": Opt(Obj({})),
    }, required=("nodes", "results", "verdict")),
    "nccl-bench": Obj({
        "run": Opt(Obj({"min_busbw": Opt(NUMBER)})),
        "hosts": Opt(MapOf(ANY)),
        "rows": ListOf(Obj({"op": TEXT, "group": Opt(TEXT), "size": NUMBER, "out_of_place": OUTCOME,
                                "in_place": OUTCOME}, required=("op", "size"))),
        "summary": Opt(Obj({"avg_busbw_gbs": Opt(NUMBER), "wrong": Opt(NUMBER)})),
        "localisation": Opt(Obj({
            "pairs": Opt(ListOf(Obj({"nodes": ListOf(TEXT), "busbw_gbs": Opt(NUMBER)}))),
            "suspects": ListOf(Obj({"node": TEXT, "busbw_gbs": NUMBER, "median_gbs": NUMBER},
                                   required=("node", "busbw_gbs", "median_gbs"))),
            "median_gbs": Opt(NUMBER),
        })),
        "expected": Opt(MapOf(Opt(Obj({"busbw_gbs": Opt(NUMBER)})))),
        "error": Opt(Obj({})),
    }),
    "run-trainer": Obj({
        "config": Opt(Obj({})),
        "restarts": Opt(NUMBER),
        "metrics": Opt(MapOf(ListOf(Obj({"step": NUMBER, "loss": Opt(NUMBER), "tokens_per_s": Opt(NUMBER)},
                                        required=("step",))))),
        "metrics_summary": Opt(Obj({})),
        "root_cause": Opt(Obj({"host": Opt(SCALAR), "rank": Opt(SCALAR)})),
        "consequences": Opt(ListOf(Obj({}))),
        "attempts": Opt(ListOf(ANY)),
        "checksums_equal": Opt(ANY),
        "hang": Opt(Obj({})),
        "stragglers": Opt(ListOf(Obj({"rank": NUMBER, "slower_x": NUMBER}, required=("rank",)))),
    }),
    "attach": Obj({
        "host": Opt(SCALAR),
        "job": Opt(Obj({"id": Opt(SCALAR), "launcher": Opt(SCALAR), "world_size": Opt(SCALAR),
                        "ranks_elsewhere": Opt(ListOf(NUMBER))})),
        "ranks": Opt(ListOf(Obj({"rank": NUMBER, "pid": Opt(NUMBER), "host": Opt(SCALAR), "where": Opt(SCALAR),
                                 "wait": Opt(Obj({})), "moved": Opt(ANY)}, required=("rank",)))),
        "diagnosis": Opt(Obj({"category": Opt(SCALAR), "summary": Opt(SCALAR), "fix": Opt(SCALAR),
                              "culprits": Opt(ListOf(Obj({"rank": Opt(SCALAR), "host": Opt(SCALAR),
                                                          "where": Opt(SCALAR)})))})),
        "stopped": Opt(Obj({})),
    }),
}


def check_document(doc: Mapping, name: str, facts_shapes: Mapping[str, Any] | None = None) -> None:
    """Raise a UsageError naming the file and the first key whose value has the wrong shape. ``facts_shapes``:
    each installed check's declared ``facts_shape`` by name (its facts are checked against it)."""
    kind = doc.get("kind")
    body = BODIES[kind]
    check(doc, Obj({**COMMON, **body.keys}, required=body.required), name, "")
    shapes = {}
    for check_name, spec in (facts_shapes or {}).items():
        try:
            shapes[check_name] = from_spec(spec)
        except ValueError:  # a plugin's malformed declaration: its facts are simply not checked
            continue
    for node, data in (doc.get("nodes") or {}).items() if kind == "preflight" else ():
        for check_name, facts in (data.get("facts") or {}).items():
            if check_name in shapes and facts is not None:
                check(facts, shapes[check_name], name, f"nodes.{node}.facts.{check_name}")


def check(value: Any, shape: Any, name: str, where: str) -> None:
    """Walk ``value`` against ``shape``; the document's depth is already bounded (inputs.MAX_DEPTH)."""
    if isinstance(shape, Opt):
        if value is not None:
            check(value, shape.inner, name, where)
    elif isinstance(shape, Obj):
        _expect(isinstance(value, dict), value, "an object", name, where)
        for key in shape.required:
            if key not in value:
                raise UsageError(f"{name}: bad document shape: {_join(where, key)} is missing")
        for key, inner in shape.keys.items():
            if key in value:
                check(value[key], inner, name, _join(where, key))
    elif isinstance(shape, ListOf):
        _expect(isinstance(value, list), value, "a list", name, where)
        for i, item in enumerate(value):
            check(item, shape.item, name, f"{where}[{i}]")
    elif isinstance(shape, MapOf):
        _expect(isinstance(value, dict), value, "an object", name, where)
        for key, item in value.items():
            check(item, shape.value, name, _join(where, key))
    elif isinstance(shape, OneOf):
        _expect(value in shape.values and isinstance(value, str), value, " / ".join(shape.values), name, where)
    else:
        _expect(_scalar_ok(value, shape), value, _NAMES[shape], name, where)


_NAMES = {NUMBER: "a number", TEXT: "a string", ANY: "anything", SCALAR: "a string, number or null"}


def _scalar_ok(value: Any, shape: str) -> bool:
    if shape == ANY:
        return True
    if shape == TEXT:
        return isinstance(value, str)
    if shape == NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return value is None or isinstance(value, (str, int, float, bool))


def _expect(ok: bool, value: Any, wanted: str, name: str, where: str) -> None:
    if not ok:
        shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
        raise UsageError(f"{name}: bad document shape: {where or 'the document'} should be {wanted}, "
                         f"got {shown[:60]}")


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)
