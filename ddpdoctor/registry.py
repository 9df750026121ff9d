"""Finding checks: the entry-point group ``ddpdoctor.checks`` (built-ins and plugins alike), and selection.

A plugin that fails to import, or is not a Check, becomes a ``BrokenCheck`` whose every result is a
fail naming the plugin and its distribution: one bad plugin never stops the run. That fail is the tool's own
(``tool_error``, like a gather that raises): the unattended node check never drains a node for it.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Iterable, Mapping

from .api import Check, Level, NodeContext, Result
from .errors import UsageError

GROUP = "ddpdoctor.checks"
TOOL_ERROR = "tool_error"  # in a result's details: the tool failed, not the node (runner.py's gathers too)
PHASES = ("local", "cluster", "collective")


@dataclass
class LoadedCheck:
    check: Check
    source: str  # distribution name and version, "ddpdoctor 0.1.0" for built-ins
    entry_point: str

    @property
    def name(self) -> str:
        return self.check.name

    def describe(self) -> dict:
        return {
            "name": self.check.name,
            "description": self.check.description,
            "phase": self.check.phase,
            "source": self.source,
            "entry_point": self.entry_point,
            "options": {k: {"default": o.default, "help": o.help} for k, o in self.check.options.items()},
        }


class BrokenCheck(Check):
    """Stands in for a plugin that could not be loaded or raised while being built."""

    phase = "local"

    def __init__(self, name: str, source: str, error: str):
        self.name = name
        self.source = source
        self.error = error
        self.description = f"(plugin failed to load from {source})"

    def gather(self, ctx: NodeContext) -> dict:
        return {"error": self.error}

    def compare(self, facts_by_node, opts) -> list[Result]:
        return [
            Result(
                check=self.name,
                level=Level.FAIL,
                summary=f"check plugin {self.name!r} from {self.source} failed to load",
                nodes=sorted(facts_by_node),
                actual=self.error.strip().splitlines()[-1] if self.error.strip() else self.error,
                expected="a ddpdoctor.api.Check subclass that imports cleanly",
                fix=f"pip install --force-reinstall '{self.source.split()[0]}'  # or uninstall it, or --skip {self.name}",
                details={"traceback": self.error, TOOL_ERROR: True},  # an upgrade broke it: no drain
            )
        ]


def _dist_label(ep: metadata.EntryPoint, labels: dict[int, str] | None = None) -> str:
    """"NAME VERSION" of the entry point's distribution. ``labels`` keeps them by distribution for one
    discovery: each ``metadata``/``version`` parses the distribution's METADATA file again (two parses per
    check, 34 for the built-ins alone, a fifth of a single-node preflight's own CPU)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown distribution"
    if labels is not None and id(dist) in labels:
        return labels[id(dist)]
    meta = dist.metadata
    label = f"{meta['Name']} {meta['Version']}"
    if labels is not None:
        labels[id(dist)] = label
    return label


def _instantiate(ep: metadata.EntryPoint, labels: dict[int, str] | None = None) -> LoadedCheck:
    source = _dist_label(ep, labels)
    try:
        obj = ep.load()
        check = obj() if isinstance(obj, type) else obj
        if not isinstance(check, Check):
            raise TypeError(f"{ep.value} is {type(check).__name__}, not a ddpdoctor.api.Check")
        if not check.name:
            check.name = ep.name
        if check.phase not in PHASES:
            raise TypeError(f"{ep.value}: phase {check.phase!r} is not one of {PHASES}")
    except Exception:  # noqa: BLE001 - any plugin error becomes a fail result, by design
        check = BrokenCheck(ep.name, source, traceback.format_exc())
    return LoadedCheck(check=check, source=source, entry_point=ep.value)


def discover() -> list[LoadedCheck]:
    """Every registered check, in phase order then name order. Duplicate names: the first wins, the
    others become broken checks so the clash is visible."""
    seen: dict[str, LoadedCheck] = {}
    out: list[LoadedCheck] = []
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda e: (e.name, e.value))
    labels: dict[int, str] = {}  # the entry points of one distribution share its object while this runs
    for ep in eps:
        loaded = _instantiate(ep, labels)
        if loaded.name in seen and seen[loaded.name].entry_point != loaded.entry_point:
            dup = BrokenCheck(
                f"{loaded.name}@{ep.value}",
                loaded.source,
                f"check name {loaded.name!r} is already registered by {seen[loaded.name].entry_point}",
            )
            out.append(LoadedCheck(dup, loaded.source, ep.value))
            continue
        if loaded.name in seen:
            continue  # the same entry point seen twice (editable + wheel metadata)
        seen[loaded.name] = loaded
        out.append(loaded)
    out.sort(key=lambda lc: (PHASES.index(lc.check.phase), lc.name))
    return out


def select(
    loaded: list[LoadedCheck], only: Iterable[str] = (), skip: Iterable[str] = ()
) -> list[LoadedCheck]:
    """Apply --only / --skip. An unknown name is a usage error listing the known ones. A check chosen by
    --only brings the checks of its own phase it ``uses`` (gpu-health reads the gpu check's facts), unless
    --skip names them."""
    only, skip = list(only), list(skip)
    known = {lc.name for lc in loaded}
    unknown = sorted({n for n in only + skip if n not in known})
    if unknown:
        raise UsageError(
            f"unknown check(s): {', '.join(unknown)} (known: {', '.join(sorted(known))}; see `ddpdoctor checks`)"
        )
    wanted = set(only)
    named = by_name(loaded)
    for name in list(wanted):
        lc = named[name]
        wanted.update(u for u in lc.check.uses if u in named and named[u].check.phase == lc.check.phase)
    chosen = [lc for lc in loaded if (not only or lc.name in wanted) and lc.name not in skip]
    return chosen


def by_name(loaded: list[LoadedCheck]) -> Mapping[str, LoadedCheck]:
    return {lc.name: lc for lc in loaded}


def opt_in_sets(loaded: Iterable[LoadedCheck], groups: Iterable[str]) -> tuple[str, ...]:
    """``--set`` items turning on every check that declares ``opt_in`` in ``groups`` (its "enabled" option):
    `preflight --perf` enables whichever installed checks say ``opt_in = "perf"``, none known by name here."""
    wanted = set(groups)
    return tuple(f"{lc.name}.enabled=true" for lc in loaded
                 if getattr(lc.check, "opt_in", "") in wanted and "enabled" in (lc.check.options or {}))


@lru_cache(maxsize=1)
def installed() -> dict[str, Check]:
    """The installed checks by name, discovered once per process (readers of documents ask many times)."""
    return {lc.name: lc.check for lc in discover()}
