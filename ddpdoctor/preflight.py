"""The preflight engine for one node: plan (checks, options, run settings), gather, compare, document.

The cluster layer (ddpdoctor.cluster) reuses ``Plan`` and ``gather_phase`` on every node and runs
``compare_all`` on the master over every node's facts.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from . import model, registry, runner
from .api import Result
from .config import parse_set, read_toml, resolve_check_options, resolve_run


@dataclass
class Plan:
    checks: list[registry.LoadedCheck]
    opts_by_check: dict[str, dict[str, Any]]
    run: dict[str, Any]

    def phase(self, name: str) -> list[registry.LoadedCheck]:
        return [lc for lc in self.checks if lc.check.phase == name]


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
) -> Plan:
    """Everything decided before any work: which checks, with which options, for which run."""
    file_cfg = read_toml(config_path)
    loaded = registry.discover()
    chosen = registry.select(loaded, split_names(only), split_names(skip))
    opts = resolve_check_options(loaded, file_cfg, parse_set(sets), source=config_path or "")
    run = resolve_run(file_cfg, dict(run_flags or {}), source=config_path or "")
    return Plan(checks=chosen, opts_by_check=opts, run=run)


def node_name() -> str:
    return socket.gethostname() or "localhost"


def gather_phase(plan: Plan, phase: str, node: str, *, rank: int = 0, nnodes: int = 1, cluster: Any = None,
                 deadline: float | None = None):
    return runner.gather_all(
        plan.phase(phase), node, rank=rank, nnodes=nnodes, run=plan.run,
        opts_by_check=plan.opts_by_check, cluster=cluster, deadline=deadline,
    )


def run_single_node(plan: Plan) -> dict:
    """`ddpdoctor preflight` with no cluster flags: this machine's local checks, judged on their own."""
    node = node_name()
    started = time.perf_counter()
    facts, outcome = gather_phase(plan, "local", node)
    gathered = time.perf_counter()
    nodes = {node: {"rank": 0, "host": node, "addr": None, "facts": facts, "gather": outcome}}
    local_checks = plan.phase("local")
    results: list[Result] = runner.compare_all(local_checks, nodes, plan.opts_by_check, run=dict(plan.run, nnodes=plan.run.get("nnodes") or 1))
    finished = time.perf_counter()
    return model.preflight_doc(
        scope="node",
        nodes=nodes,
        checks=[lc.describe() for lc in local_checks],
        results=results,
        run={k: v for k, v in plan.run.items() if v is not None},
        timings={"gather_s": round(gathered - started, 3), "compare_s": round(finished - gathered, 3)},
    )
