"""Typed settings: check options and run settings from defaults < ddpdoctor.toml < flags.

ddpdoctor.toml::

    [run]                 # run-wide settings every check can read (ctx.run / opts)
    gpus_per_node = 8

    [checks.clock-skew]   # one table per check; keys are that check's declared options
    warn_ms = 100
    fail_ms = 1000

    [node-check]          # the unattended node check's own settings (ddpdoctor/unattended/site.py)

A malformed file, an unknown check, an unknown key or a bad value is a UsageError naming file and key.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from .options import Option
from .errors import UsageError
from .inputs import MAX_CONFIG_BYTES, MAX_TIMEOUT_S, read_bounded
from .registry import LoadedCheck

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# [run] keys, typed like check options: a wrong type or an absurd number is a usage error naming the key.
RUN_OPTIONS = {
    "gpus_per_node": Option(None, "GPUs every node must show (too few is a fail); default: the launcher's "
                                  "processes per node", type=int, min=0, max=4096),
    "nnodes": Option(None, "number of nodes expected in the cluster", type=int, min=1, max=1_000_000),
    "nproc_per_node": Option(None, "processes the job starts on this node (nodes may differ): with GPUs, each "
                                   "needs one", type=int, min=1, max=4096),
    "timeout": Option(None, "seconds the preflight waits for nodes and network steps", type=float, min=1,
                      max=MAX_TIMEOUT_S),
    "output_dir": Option(None, "where result files are written (the resources check measures free disk there)",
                         type=str),
}
RUN_KEYS = {key: opt.help for key, opt in RUN_OPTIONS.items()}
# The tables of ddpdoctor.toml; [node-check] is read by the unattended node check (unattended/site.py) only.
TABLES = ("run", "checks", "node-check")


def read_toml(path: str | None) -> dict:
    if not path:
        return {}
    return parse_toml(read_bounded(Path(path), MAX_CONFIG_BYTES), path)


def parse_toml(raw: bytes, path: str | os.PathLike) -> dict:
    """A config's bytes (read once, by the caller: the unattended check reads through the descriptor it checked)
    parsed and its tables checked; ``path`` names it in errors."""
    p = Path(path)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config {p}: malformed TOML ({exc})") from exc
    except RecursionError:  # arrays nested thousands deep: tomllib recurses
        raise UsageError(f"config {p}: malformed TOML (nested too deep)") from None
    for key in data:
        if key not in TABLES:
            raise UsageError(f"config {p}: unknown table [{key}] (expected [run], [checks.NAME] or [node-check])")
    if not isinstance(data.get("run", {}), dict):
        raise UsageError(f"config {p}: key 'run' must be the [run] table, got {data['run']!r}")
    if not isinstance(data.get("checks", {}), dict):
        raise UsageError(f"config {p}: key 'checks' must be a table of [checks.NAME] tables")
    for key in data.get("run", {}):
        if key not in RUN_KEYS:
            raise UsageError(f"config {p}: unknown key run.{key} (known: {', '.join(sorted(RUN_KEYS))})")
    return data


def parse_set(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """``--set check.key=value`` flags -> {check: {key: value}}."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name_key, sep, value = item.partition("=")
        check, dot, key = name_key.rpartition(".")
        if not sep or not dot or not check or not key:
            raise UsageError(f"--set {item!r}: expected CHECK.KEY=VALUE, e.g. --set clock-skew.warn_ms=200")
        out.setdefault(check, {})[key] = value
    return out


def resolve_check_options(
    loaded: list[LoadedCheck], file_cfg: Mapping, overrides: Mapping[str, Mapping[str, Any]], source: str = ""
) -> dict[str, dict[str, Any]]:
    """Each check's options: declared defaults, then the config file's [checks.NAME], then --set."""
    by_name = {lc.name: lc.check for lc in loaded}
    resolved = {name: {k: o.default for k, o in check.options.items()} for name, check in by_name.items()}
    layers = [(file_cfg.get("checks", {}), f"config {source}" if source else "config"), (overrides, "--set")]
    for table, where in layers:
        for check_name, values in table.items():
            if check_name not in by_name:
                raise UsageError(f"{where}: unknown check {check_name!r} in checks.{check_name}")
            if not isinstance(values, Mapping):
                raise UsageError(f"{where}: checks.{check_name} must be a table of options")
            declared = by_name[check_name].options
            for key, value in values.items():
                if key not in declared:
                    known = ", ".join(sorted(declared)) or "none"
                    raise UsageError(f"{where}: unknown option checks.{check_name}.{key} (known: {known})")
                try:
                    resolved[check_name][key] = declared[key].convert(value)
                except (TypeError, ValueError) as exc:
                    raise UsageError(f"{where}: bad value for checks.{check_name}.{key}: {exc}") from exc
    return resolved


def resolve_run(file_cfg: Mapping, flags: Mapping[str, Any], source: str = "") -> dict[str, Any]:
    """Run settings: the config file's [run] table (typed and bounded like check options), then the flags."""
    run = {k: None for k in RUN_OPTIONS}
    for key, value in file_cfg.get("run", {}).items():
        try:
            run[key] = RUN_OPTIONS[key].convert(value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"config {source}: bad value for run.{key}: {exc}") from exc
    for key, value in flags.items():
        if value is not None:
            run[key] = value
    return run
