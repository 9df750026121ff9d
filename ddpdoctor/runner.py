"""Running checks: gather on this node (in parallel, each with a deadline) and compare facts into results.

Both steps contain failures: a gather that raises or overruns its deadline becomes a fail result for that
node, a compare that raises becomes a fail result naming the check and its source. Nothing here talks
to other nodes; the cluster layer moves facts between nodes and calls ``compare_all`` on the master.

The check contract (ddpdoctor.api): right after a gather, on the node, the check's ``exports`` and
``comparable`` of those facts are computed and travel in the gather outcome; ``compare_all`` lifts them into
the node's entry (``nodes[NODE]["exports"][CHECK]``, ``["comparable"][CHECK]``), where documents keep them.
Reading them (``node_exports``/``node_comparable``/``exported``) lives in ``ddpdoctor.exports``, below the
engine, so that the renderer reads a document without importing the engine.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .api import Level, NodeContext, Result, Skip
from .exports import _json_safe, contract, lift_contract, node_comparable
from .redaction import scrub
from .registry import TOOL_ERROR, LoadedCheck  # TOOL_ERROR: a check's own failure (raised, hung, not loaded)

# A gather's outcome, stored beside its facts: {"status": ok|skip|error|timeout, "message", "seconds"}.
OK, SKIPPED, ERROR, TIMEOUT = "ok", "skip", "error", "timeout"


def _gather_one(lc: LoadedCheck, ctx: NodeContext, box: dict) -> None:
    start = time.perf_counter()
    try:
        facts = lc.check.gather(ctx)
        if not isinstance(facts, dict):
            raise TypeError(f"gather() returned {type(facts).__name__}, not a dict")
        facts = scrub(_json_safe(facts))
        box.update(status=OK, facts=facts)
        box.update(contract(lc.check, facts))
    except Skip as exc:
        box.update(status=SKIPPED, message=str(exc) or "not applicable here", facts={})
    except BaseException as exc:  # noqa: BLE001 - a plugin must never take the run down
        tb = traceback.format_exc()
        box.update(status=ERROR, message=f"{type(exc).__name__}: {exc}", traceback=tb, facts={})
    box["seconds"] = round(time.perf_counter() - start, 4)


def gather_all(
    checks: Iterable[LoadedCheck],
    node: str,
    *,
    rank: int = 0,
    nnodes: int = 1,
    run: Mapping | None = None,
    opts_by_check: Mapping[str, Mapping] | None = None,
    cluster: Any = None,
    deadline: float | None = None,
    within_budget: bool = False,
    kept: Mapping | None = None,
    budget_s: float | None = None,
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Gather every check on this node at once. Returns (facts by check, outcome by check).

    Threads are daemons: a gather stuck in a driver call is abandoned at its deadline (its own timeout,
    or the run's ``deadline`` when that comes first), not waited for. ``within_budget`` (the unattended node
    check, which must end within SLURM's limits): the checks that declare no ``imports`` start at once, beside
    the imports, which end at the ``deadline`` too; a check the deadline cuts short (not its own timeout), or whose
    import is not done by then, is skipped with a note, never a failure; ``budget_s`` is the budget those notes name
    (the node check's, counted from its process's start; default: from here to the deadline).

    ``kept`` (the unattended prolog and epilog: unattended/kept.py): nothing in any check's ``imports`` is imported;
    such a check runs on the facts the node's health check kept for this software environment (live with
    ``ctx.kept`` where it declares ``kept_facts``), or is skipped with a note when none are kept.
    """
    checks = list(checks)
    started = time.monotonic()
    common = dict(node=node, rank=rank, nnodes=nnodes, run=dict(run or {}), cluster=cluster)
    if kept is not None:
        work = [_start(lc, opts_by_check, deadline, common) if not lc.check.imports
                else _from_kept(lc, kept, opts_by_check, deadline, common) for lc in checks]
        return _collect(checks, work, started, within_budget, deadline, budget_s)
    importer = Imports(checks)
    importer.run(in_background=within_budget and deadline is not None)
    later = [lc for lc in checks if importer.needed_by(lc)] if importer.background else []
    work = [_start(lc, opts_by_check, deadline, common) for lc in checks if lc not in later]
    if later:
        unimported = importer.wait(deadline)
        for lc in later:
            late = sorted(unimported & set(lc.check.imports))
            if late:  # never started: it would import the module a second time, beside the abandoned import
                budget = budget_s if budget_s is not None else deadline - started
                work.append((lc, {"status": SKIPPED, "message": f"not run: importing {', '.join(late)} did not "
                                  f"finish within the {budget:g} s budget", "facts": {}, "for_time": True}, None, 0.0))
            else:
                work.append(_start(lc, opts_by_check, deadline, common))
    return _collect(checks, work, started, within_budget, deadline, budget_s)


def _collect(checks: list[LoadedCheck], work: list[tuple], started: float, within_budget: bool,
             deadline: float | None, budget_s: float | None) -> tuple[dict[str, dict], dict[str, dict]]:
    """Each started gather's facts and outcome, a thread still running at its deadline abandoned (a daemon)."""
    facts: dict[str, dict] = {}
    outcome: dict[str, dict] = {}
    for lc, box, t, deadline_of_check in sorted(work, key=lambda w: checks.index(w[0])):
        if t is not None:
            t.join(max(0.0, deadline_of_check - time.monotonic()))
        if t is not None and t.is_alive():
            limit = round(deadline_of_check - started, 1)
            box = {"status": TIMEOUT, "message": f"gather did not finish within {limit:g} s",
                   "seconds": limit, "facts": {}}
            if within_budget and deadline is not None and deadline_of_check >= deadline:
                budget = budget_s if budget_s is not None else limit
                box.update(status=SKIPPED, message=f"not finished within the {budget:g} s budget: skipped (run "
                           f"`ddpdoctor preflight --only {lc.name}` to see it through)", for_time=True)
        facts[lc.name] = box.get("facts", {})
        outcome[lc.name] = {k: v for k, v in box.items() if k != "facts"}
    return facts, outcome


def _from_kept(lc: LoadedCheck, kept: Mapping, opts_by_check: Mapping | None, deadline: float | None,
               common: dict) -> tuple:
    """A check with ``imports`` where nothing may be imported: live on its kept facts (``kept_facts``), its kept
    facts whole, or skipped with a note saying who measures them."""
    if lc.check.opt_in and not lc.check.with_defaults((opts_by_check or {}).get(lc.name)).get("enabled"):
        return _start(lc, opts_by_check, deadline, common)  # off: it skips itself before any import
    facts = (kept.get("facts") or {}).get(lc.name)
    skipped = (kept.get("skipped") or {}).get(lc.name)
    if isinstance(skipped, str) and not isinstance(facts, dict):
        return lc, {"status": SKIPPED, "message": f"{skipped} (the health check's finding, kept)", "facts": {}}, \
            None, 0.0
    if not isinstance(facts, dict):
        why = (f"not measured in this software environment yet: the health check measures it (it imports "
               f"{', '.join(lc.check.imports)}; a prolog or epilog never does)")
        return lc, {"status": SKIPPED, "message": why, "facts": {}}, None, 0.0
    if lc.check.kept_facts:
        return _start(lc, opts_by_check, deadline, common, {k: facts.get(k) for k in lc.check.kept_facts})
    box = {"status": OK, "facts": dict(facts), "seconds": 0.0, "kept_from": str(kept.get("created") or "")}
    box.update(contract(lc.check, facts))
    return lc, box, None, 0.0


def _start(lc: LoadedCheck, opts_by_check: Mapping | None, deadline: float | None, common: dict,
           kept: dict | None = None) -> tuple:
    """One check's gather on a daemon thread: (check, its result box, the thread, its deadline)."""
    own = time.monotonic() + lc.check.timeout_s
    deadline_of_check = own if deadline is None else min(own, deadline)
    ctx = NodeContext(opts=lc.check.with_defaults((opts_by_check or {}).get(lc.name)), deadline=deadline_of_check,
                      kept=kept, **common)
    box: dict = {}
    t = threading.Thread(target=_gather_one, args=(lc, ctx, box), name=f"gather-{lc.name}", daemon=True)
    t.start()
    return lc, box, t, deadline_of_check


class Imports:
    """What the checks declare in ``imports``, imported before their gathers start: two threads importing torch at
    once can get a half-initialised module or abort the process. In the background (the node check's budget) the
    imports run on one helper thread, abandoned at the deadline (torch from a slow shared filesystem): the checks
    that need a module not imported by then must not start (they would import it a second time, at once)."""

    def __init__(self, checks: list[LoadedCheck]):
        self.names = sorted({m for lc in checks for m in getattr(lc.check, "imports", ())})
        self.done: set[str] = set()
        self.background: threading.Thread | None = None

    def needed_by(self, lc: LoadedCheck) -> bool:
        return bool(set(getattr(lc.check, "imports", ())) & set(self.names))

    def _work(self) -> None:
        import importlib

        from .shared_libs import package_damage, refuse

        for name in self.names:
            damage = package_damage(name)
            if damage:  # loading it would kill this process (SIGBUS): its checks' own imports raise instead
                refuse(name, damage)
                self.done.add(name)
                continue
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the check that needs it reports the failure itself
                pass
            self.done.add(name)

    def run(self, in_background: bool = False) -> None:
        if not in_background or not self.names:
            self._work()
            return
        self.background = threading.Thread(target=self._work, name="gather-imports", daemon=True)
        self.background.start()

    def wait(self, deadline: float) -> set[str]:
        """The modules still not imported at the deadline."""
        if self.background is not None:
            self.background.join(max(0.0, deadline - time.monotonic()))
        return set(self.names) - self.done


def plugin_failure(lc: LoadedCheck, nodes: list[str], summary: str, actual: Any, expected: str,
                   traceback_text: str | None = None) -> Result:
    """A check's own failure (its gather, its contract methods or its compare raised) as a fail result
    naming the check and where it comes from: one plugin's bug never loses the other checks' results."""
    details: dict = {TOOL_ERROR: True}  # the tool failed, not the node: the unattended check never drains for it
    if traceback_text is not None:
        details["traceback"] = traceback_text
    return Result(check=lc.name, level=Level.FAIL, summary=summary, nodes=nodes, actual=actual, expected=expected,
                  fix=f"report this to the plugin's authors ({lc.source}); run with --skip {lc.name} meanwhile",
                  details=details)


def _node_facts(lc: LoadedCheck, data: Mapping) -> dict:
    """What this check's compare receives for one node: its own facts, the used checks' and the comparables."""
    own = dict((data.get("facts") or {}).get(lc.name, {}))
    if lc.check.uses:
        own["uses"] = {u: (data.get("facts") or {}).get(u) for u in lc.check.uses
                       if ((data.get("gather") or {}).get(u) or {}).get("status") == OK}
    if lc.check.reads_comparables:
        own["comparable"] = node_comparable(data)
    return own


def _sort_outcomes(lc: LoadedCheck, nodes: Mapping[str, Mapping]) -> tuple[dict[str, dict], list[Result]]:
    """This check's facts by node where its gather succeeded, and results for where it did not."""
    name = lc.name
    ok_facts: dict[str, dict] = {}
    skipped: dict[str, list[str]] = {}
    results: list[Result] = []
    for node, data in nodes.items():
        outcome = (data.get("gather") or {}).get(name)
        if outcome is None:
            continue  # this node did not run the check (the parity check reports that)
        status = outcome.get("status")
        if status == OK:
            ok_facts[node] = _node_facts(lc, data)
            error = data.get("contract_errors", {}).get(name)
            if error:
                results.append(plugin_failure(lc, [node], f"check {name!r} raised in exports() or comparable(): "
                                              f"{error}", error, "pure functions of the facts"))
        elif status == SKIPPED:
            skipped.setdefault(outcome.get("message", ""), []).append(node)
        else:
            results.append(plugin_failure(lc, [node], f"check {name!r} could not gather facts: "
                                          f"{outcome.get('message', status)}", outcome.get("message"),
                                          "gather returns facts", outcome.get("traceback", "")))
    for reason, where in sorted(skipped.items()):
        results.append(Result(check=name, level=Level.SKIP, summary=reason, nodes=sorted(where)))
    return ok_facts, results


def compare_all(
    checks: Iterable[LoadedCheck],
    nodes: Mapping[str, Mapping],
    opts_by_check: Mapping[str, Mapping] | None = None,
    run: Mapping | None = None,
) -> list[Result]:
    """Turn every node's facts into results. ``nodes`` maps node name -> {"facts": {...}, "gather": {...}}.

    ``opts`` given to compare is the check's resolved options plus the run-wide settings (nnodes,
    gpus_per_node, ...), so a pure compare sees everything it may judge against.
    """
    opts_by_check = opts_by_check or {}
    lift_contract(nodes)
    results: list[Result] = []
    for lc in checks:
        ok_facts, failures = _sort_outcomes(lc, nodes)
        results.extend(failures)
        if not ok_facts:
            continue
        opts = dict(run or {})
        opts.update(opts_by_check.get(lc.name, {}))
        opts = lc.check.with_defaults(opts)
        try:
            produced = lc.check.compare(ok_facts, opts)
            for r in produced:
                if not isinstance(r, Result):
                    raise TypeError(f"compare() yielded {type(r).__name__}, not a Result")
                r.check = r.check or lc.name
            results.extend(produced)
        except Exception as exc:  # noqa: BLE001
            results.append(plugin_failure(lc, sorted(ok_facts), f"check {lc.name!r} raised while comparing facts: "
                                          f"{type(exc).__name__}: {exc}", f"{type(exc).__name__}: {exc}",
                                          "a list of Results", traceback.format_exc()))
    return results


# ------------------------------------------------------------------------------------------ the plan
@dataclass
class Plan:
    """Everything decided before any work (preflight.make_plan builds it): which checks, their resolved
    options, the run's settings. The single-node engine and every node of a cluster run from one."""

    checks: list[LoadedCheck]
    opts_by_check: dict[str, dict[str, Any]]
    run: dict[str, Any]

    def phase(self, name: str) -> list[LoadedCheck]:
        return [lc for lc in self.checks if lc.check.phase == name]


def gather_phase(plan: Plan, phase: str, node: str, *, rank: int = 0, nnodes: int = 1, cluster: Any = None,
                 deadline: float | None = None, within_budget: bool = False, kept: Mapping | None = None,
                 budget_s: float | None = None) -> tuple[dict[str, dict], dict[str, dict]]:
    """``gather_all`` of one phase's checks of a plan (local, cluster, collective)."""
    return gather_all(plan.phase(phase), node, rank=rank, nnodes=nnodes, run=plan.run,
                      opts_by_check=plan.opts_by_check, cluster=cluster, deadline=deadline,
                      within_budget=within_budget, kept=kept, budget_s=budget_s)
