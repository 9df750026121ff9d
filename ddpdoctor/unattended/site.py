"""The site config of the unattended node check: where it is ($DDPDOCTOR_CONFIG, else /etc/ddpdoctor/ddpdoctor.toml)
and its [node-check] table, typed and bounded like check options (the same file's [run] and [checks.NAME] tables
set the checks' options, as for `ddpdoctor preflight --config`)::

    [node-check]
    results_dir = "/var/lib/ddpdoctor/node-check"  # one JSON per run, in a folder per node (and the kept facts)
    keep = 5000                 # the newest results kept per node
    drain_on = "fail"           # "fail"; "warn": warnings drain too; "never": record only
    budget_s = 30               # a health check's (or a person's run's) bound, from its start (SLURM kills it at 60 s)
    prolog_budget_s = 3         # a prolog's or epilog's bound: every job pays it (about 0.3 s on a healthy node)
    skip = ["gpu-perf"]         # or only = [...]: the local checks to run (opt-in ones stay off unless named)
    prometheus_textfile = "/var/lib/prometheus/node-exporter"   # also write ddpdoctor.prom there
    scontrol = "/usr/bin/scontrol"                  # a prolog runs with no PATH
    slurm_conf = "/etc/slurm/slurm.conf"            # for scontrol: a health check runs without SLURM_CONF
    cross_node = false          # opt-in: a multi-node job's prologs meet for reachability, names, clocks, parity
    cross_node_key = "/etc/ddpdoctor/cross-node.key"   # the site key (root's, mode 0600) they authenticate with

A missing default file means the defaults; a file named by $DDPDOCTOR_CONFIG that is missing, a malformed one, an
unknown key or a bad value is a UsageError naming the file and key. As root, a file another uid owns or can write
(by its mode or an ACL entry), a link another uid owns, or a folder on the way from / that another uid owns or can
write (sshd's StrictModes) is refused, as sudo refuses such a sudoers; the file is read once, from the descriptor
that was checked.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import trust
from ..errors import UsageError
from ..options import Option
from ..inputs import MAX_CONFIG_BYTES
from ..settings import parse_toml

CONFIG_ENV = "DDPDOCTOR_CONFIG"
STATE_DIR_ENV = "DDPDOCTOR_STATE_DIR"  # the state folder's default when the config names none
DEFAULT_CONFIG = "/etc/ddpdoctor/ddpdoctor.toml"
TABLE = "node-check"
DRAIN_ON = ("fail", "warn", "never")

KEYS = {
    "results_dir": Option("/var/lib/ddpdoctor/node-check", "where every run's JSON is kept (a folder per node)",
                          type=str),
    "keep": Option(5000, "the newest results kept per node (older ones are removed)", type=int, min=1,
                   max=1_000_000),
    "drain_on": Option("fail", "the level that drains the node: fail, warn (warnings too) or never", type=str),
    "budget_s": Option(30.0, "seconds a health check (or a person's run) takes at most, from its start, torch's "
                       "import included; a check not done near the end is skipped", type=float, min=1, max=3600),
    "prolog_budget_s": Option(3.0, "seconds a prolog or epilog takes at most, from its start (it imports no torch: "
                              "the health check's kept facts stand in)", type=float, min=0.5, max=300),
    "only": Option([], "run only these checks", type=list),
    "skip": Option([], "do not run these checks", type=list),
    "prometheus_textfile": Option(None, "node_exporter's textfile directory: ddpdoctor.prom is written there",
                                  type=str),
    "scontrol": Option("scontrol", "the scontrol to run (an absolute path where PATH is SLURM's minimal one)",
                       type=str),
    "slurm_conf": Option(None, "SLURM_CONF for scontrol, where the node check runs without one", type=str),
    "cross_node": Option(False, "opt-in: a multi-node job's prologs meet for the cross-node checks", type=bool),
    "state_dir": Option("/run/ddpdoctor", "where the node check carries what it could not keep to its next run when "
                        "no prometheus_textfile is set (another filesystem than results_dir: a tmpfs; "
                        f"${STATE_DIR_ENV} moves the default)", type=str),
    "cross_node_key": Option("/etc/ddpdoctor/cross-node.key", "the site key the prologs authenticate with (a file "
                             "root owns and alone can read)", type=str),
    "cross_node_port": Option(29650, "the first port of the prologs' meeting (the job's: this + job id % 1000)",
                              type=int, min=1024, max=64535),
    "cross_node_budget_s": Option(10.0, "seconds a prolog gives the meeting at most (added to prolog_budget_s)",
                                  type=float, min=1, max=300),
}


@dataclass(frozen=True)
class SiteConfig:
    """The [node-check] table, typed; ``path`` is the file it came from (None: no file, the defaults)."""

    path: str | None = None
    results_dir: str = KEYS["results_dir"].default
    keep: int = KEYS["keep"].default
    drain_on: str = "fail"
    budget_s: float = KEYS["budget_s"].default
    prolog_budget_s: float = KEYS["prolog_budget_s"].default
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    prometheus_textfile: str | None = None
    state_dir: str = field(default_factory=lambda: os.environ.get(STATE_DIR_ENV) or KEYS["state_dir"].default)
    scontrol: str = "scontrol"
    slurm_conf: str | None = None
    cross_node: bool = False
    cross_node_key: str = KEYS["cross_node_key"].default
    cross_node_port: int = KEYS["cross_node_port"].default
    cross_node_budget_s: float = KEYS["cross_node_budget_s"].default
    extra: dict = field(default_factory=dict, compare=False)  # nothing yet: room for keys of later versions
    data: dict = field(default_factory=dict, compare=False, repr=False)  # the whole file, as read once

    def scontrol_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The environment scontrol runs with: this process's, with SLURM_CONF from the config when set."""
        out = dict(env)
        if self.slurm_conf:
            out["SLURM_CONF"] = self.slurm_conf
        return out


def config_path(env: Mapping[str, str] | None = None) -> tuple[str | None, bool]:
    """(the site config's path or None, whether it was named explicitly). The default file may be absent."""
    env = os.environ if env is None else env
    named = (env.get(CONFIG_ENV) or "").strip()
    if named:
        return named, True
    return (DEFAULT_CONFIG, False) if Path(DEFAULT_CONFIG).is_file() else (None, False)


def load(path: str | None) -> SiteConfig:
    """The [node-check] table of ``path`` (None: the defaults)."""
    if path is None:
        return SiteConfig()
    if not Path(path).is_file():
        raise UsageError(f"site config {path}: no such file (${CONFIG_ENV} names it)")
    data = parse_toml(_read_once(path), path)
    table = data.get(TABLE, {})
    if not isinstance(table, dict):
        raise UsageError(f"config {path}: [{TABLE}] must be a table")
    return SiteConfig(path=path, data=data, **{key: _value(path, key, value) for key, value in table.items()})


def _read_once(path: str) -> bytes:
    """The config's bytes from the one descriptor that was checked (as root: it names a program root runs, so it,
    each link to it and every folder on the way must be root's alone; a path checked then opened again was a
    user's file in 69 of 3,000 loads)."""
    try:
        raw = trust.read_file(path, "site config", MAX_CONFIG_BYTES)
    except OSError as exc:
        raise UsageError(f"site config {path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UsageError(f"site config {path}: larger than {MAX_CONFIG_BYTES} bytes, the most ddpdoctor reads")
    return raw


def _value(path: str, key: str, value: Any) -> Any:
    if key not in KEYS:
        raise UsageError(f"config {path}: unknown key {TABLE}.{key} (known: {', '.join(sorted(KEYS))})")
    try:
        if key in ("only", "skip"):
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"expected a list of check names, got {value!r}")
            return tuple(value)
        converted = KEYS[key].convert(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"config {path}: bad value for {TABLE}.{key}: {exc}") from None
    if key == "drain_on" and converted not in DRAIN_ON:
        raise UsageError(f"config {path}: {TABLE}.drain_on must be one of {', '.join(DRAIN_ON)}, got {value!r}")
    if key in ("results_dir", "prometheus_textfile", "slurm_conf", "scontrol", "cross_node_key") \
            and not converted.strip():
        raise UsageError(f"config {path}: {TABLE}.{key} is empty")
    return converted
