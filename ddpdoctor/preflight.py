"""The preflight engine for one node: plan (checks, options, run settings), gather, compare, document.

``Plan`` and ``gather_phase`` live in the runner, which the cluster layer (ddpdoctor.cluster) uses on every
node; this module builds the plan, detects the launcher once and hands a cluster run to ``cluster.join``.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Mapping

from . import documents, registry, runner
from .runner import Plan, gather_phase
from .api import BASELINE, Result
from .settings import parse_set, read_toml, resolve_check_options, resolve_run
from .errors import UsageError


def split_names(values: Iterable[str]) -> list[str]:
    """--only a,b --only c -> [a, b, c]"""
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def make_plan(
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    config_path: str | None = None,
    sets: Iterable[str] = (),
    run_flags: Mapping[str, Any] | None = None,
    opt_in: Iterable[str] = (),
    config_data: Mapping[str, Any] | None = None,
) -> Plan:
    """Everything decided before any work: which checks, with which options, for which run. ``opt_in``:
    the groups of opt-in checks turned on (``Check.opt_in``: "perf" for --perf); ``config_data``: the config
    already read and parsed (``config_path`` then only names it), never read a second time."""
    file_cfg = dict(config_data) if config_data is not None else read_toml(config_path)
    loaded = registry.discover()
    chosen = registry.select(loaded, split_names(only), split_names(skip))
    sets = (*sets, *registry.opt_in_sets(loaded, opt_in))
    opts = resolve_check_options(loaded, file_cfg, parse_set(sets), source=config_path or "")
    run = resolve_run(file_cfg, dict(run_flags or {}), source=config_path or "")
    return Plan(checks=chosen, opts_by_check=opts, run=run)


def node_name() -> str:
    return socket.gethostname() or "localhost"


def run_single_node(plan: Plan, deadline: float | None = None, *, kept: dict | None = None,
                    budget_s: float | None = None) -> dict:
    """`ddpdoctor preflight` with no cluster flags: this machine's local checks, judged on their own. With a
    ``deadline`` (time.monotonic; the unattended node check) everything ends by then: a check still running, or
    whose imports are, is skipped with a note naming ``budget_s``, never a failure. ``kept``: the prolog's facts
    kept by the health check, in place of any import (runner.gather_all)."""
    node = node_name()
    started = time.perf_counter()
    facts, outcome = gather_phase(plan, "local", node, deadline=deadline, within_budget=deadline is not None,
                                  kept=kept, budget_s=budget_s)
    gathered = time.perf_counter()
    nodes = {node: {"rank": 0, "host": node, "addr": None, "facts": facts, "gather": outcome}}
    local_checks = plan.phase("local")
    results: list[Result] = runner.compare_all(local_checks, nodes, plan.opts_by_check, run=dict(plan.run, nnodes=plan.run.get("nnodes") or 1))
    finished = time.perf_counter()
    return documents.preflight_doc(
        scope="node",
        nodes=nodes,
        checks=[lc.describe() for lc in local_checks],
        results=results,
        run={k: v for k, v in plan.run.items() if v is not None},
        timings={"gather_s": round(gathered - started, 3), "compare_s": round(finished - gathered, 3)},
    )


@dataclass
class PreflightRequest:
    """Everything one preflight is asked to do, typed: built by `ddpdoctor preflight` from its flags and by
    run-trainer's gate from --preflight-args parsed with the same parser, then run by ``run``."""

    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    config_path: str | None = None
    sets: tuple[str, ...] = ()
    perf: bool = False
    gpus_per_node: int | None = None
    timeout: float = 60.0
    output_dir: str | None = None
    # the cluster: any of these (or a launcher that started several nodes) makes it a cluster run
    master: str | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    local_addr: str | None = None
    token: str | None = None
    allow_unauthenticated: bool = False  # the master takes nodes without the run's key (cluster/PROTOCOL.md)
    nproc_per_node: int | None = None
    rdzv_id: str | None = None
    code_dir: str | None = None
    shared_dir: str | None = None
    hosts: list[str] | None = None
    local_nodes: int | None = None
    # a known-good run's values (ddpdoctor.baseline.load of --baseline FILE): judged on the master's compare
    baseline: dict | None = None
    # what each node runs, for the fix that names a missing node (run-trainer's gate: its own command line)
    node_command: str | None = None
    _launcher: Any = field(default=None, init=False, repr=False, compare=False)  # launcher(): detected once

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "PreflightRequest":
        """From click's parameters of the preflight command (names match; others are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in known})

    def plan(self) -> Plan:
        run_flags = {"gpus_per_node": self.gpus_per_node, "nnodes": self.nnodes, "timeout": self.timeout,
                     "output_dir": self.output_dir, "nproc_per_node": self.nproc_per_node,
                     BASELINE: self.baseline}
        return make_plan(only=self.only, skip=self.skip, config_path=self.config_path, sets=self.sets,
                         run_flags=run_flags, opt_in=("perf",) if self.perf else ())

    def is_cluster(self, env: Mapping[str, str] | None = None) -> bool:
        """Flags decide; without them, a launcher that started this on several nodes (srun, torchrun...) does."""
        if self.master or self.local_nodes or self.hosts:
            return True
        if self.nnodes is not None:
            return self.nnodes > 1
        info = self.launcher(env)
        return info.source is not None and (info.nnodes or 1) > 1

    def launcher(self, env: Mapping[str, str] | None = None):
        """What the launcher says about this node (cluster.launcher_env.LauncherInfo), detected once per
        request from this process's environment (``env``: a recorded one, not cached) and --hosts."""
        if env is None and self._launcher is not None:
            return self._launcher
        from .cluster.launcher_env import detect

        info = detect(env, hosts=self.hosts, master=self.master)
        if env is None:
            self._launcher = info
        return info

    def single_node_only_flags(self) -> None:
        for flag, value in (("--node-rank", self.node_rank), ("--local-addr", self.local_addr),
                            ("--token", self.token), ("--shared-dir", self.shared_dir), ("--code", self.code_dir),
                            ("--baseline", self.baseline)):
            if value is not None:
                raise UsageError(f"{flag} needs a cluster run: add --master HOST:PORT --nnodes N")


def _a_second_process_on_this_node(request: PreflightRequest) -> bool:
    """A launcher started several processes on this one node and this is not the one that speaks for it (as in
    a cluster run). A launcher environment too broken to read (`--nnodes 1` skips reading it) is no reason to stop."""
    try:
        return request.launcher().another_speaks
    except UsageError:
        return False


def run(request: PreflightRequest, *, quiet: bool = False,
        worker_argv: Callable[[int, int, str], list[str]] | None = None) -> dict | None:
    """The one entry: a typed request in, the preflight document out (None: this process is a second one on
    its node, under torchrun/mpiexec/srun, and local rank 0 speaks for the node)."""
    plan = request.plan()
    if not request.is_cluster():
        request.single_node_only_flags()
        if _a_second_process_on_this_node(request):
            return None  # `torchrun --nproc-per-node 2`, `srun -n 2` on one node: one report, one result file
        return run_single_node(plan)
    from .cluster import join

    launcher = None if request.local_nodes else request.launcher()
    return join.run_cluster(plan, request, launcher, quiet=quiet, worker_argv=worker_argv)
