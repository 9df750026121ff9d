"""The unattended node check's one entry, ``run``: every step of one run within a hard time bound, from SLURM's
context to the record: the checks (a prolog or epilog on the facts the health check kept, never importing torch),
the node's state, the decision, scontrol's drain or resume, the job's comment, the record and the kept facts. The
command (cli/node_check_cmd.py) keeps the options and the renderings (its line, the JSON, the Prometheus series).

The budget is a bound on the whole process, counted from its start: the checks get all but a reserve (for the
controller's round trips and the record), and a watchdog ends the process at the budget however far it got (a
check stuck in a driver, a controller that does not answer), with the exit code decided by then.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ..errors import UsageError
from ..launchers import slurm_node
from . import kept, node_check, site, unkept
from .node_check import EPILOG, HEALTH_CHECK, PROLOG, Decision, Where

# What the previous runs could not keep (the records not kept since the last one kept), as ``run`` is given it
NOTHING_CARRIED = {"count": 0, "why": "", "since_s": 0.0, "since": None}
RESERVE_S = 5.0  # at most this much of the budget is kept for scontrol and the record, at most 40 % of it


@dataclass
class Outcome:
    """One run: its record (a preflight document with ``node_check``), where it ran, what it decided and did, the
    exit code for SLURM, and lines for stderr (what could not be written: the run's verdict stands)."""

    doc: dict
    at: Where
    decision: Decision
    done: dict
    exit_code: int
    site: site.SiteConfig
    written: Path | None = None
    notes: list[str] = field(default_factory=list)


class HardBound:
    """Ends the process at ``deadline`` (time.monotonic) whatever it is doing: a daemon thread, so nothing waits
    for it; armed only in the console script's own process (never inside a test's or a library caller's)."""

    def __init__(self, at: Where, deadline: float, budget_s: float):
        self.at, self.deadline, self.budget_s = at, deadline, budget_s
        self.stage = "starting"
        self.fails = False
        self._done = threading.Event()

    def arm(self) -> None:
        threading.Thread(target=self._watch, name="node-check-bound", daemon=True).start()

    def disarm(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(max(0.0, self.deadline - time.monotonic())):
            return
        code = 1 if self.fails and self.at.context in (PROLOG, EPILOG) else 0
        try:
            sys.stderr.write(f"ddpdoctor-slurm-check: the {self.budget_s:g} s budget ran out during {self.stage}: "
                             f"ended there (exit {code}; "
                             + ("the node was found failing" if self.fails else "the node neither drained nor the "
                                "job failed for it") + ")\n")
            sys.stderr.flush()
        finally:
            os._exit(code)

    def remaining(self, floor: float = 0.1) -> float:
        return max(floor, self.deadline - time.monotonic() - 0.2)


def budget_of(cfg: site.SiteConfig, at: Where) -> float:
    """A prolog or epilog runs for every job: its own short budget; a health check or a person's run: budget_s."""
    if at.context == PROLOG and cfg.cross_node:
        return cfg.prolog_budget_s + cfg.cross_node_budget_s  # the job's nodes meet too
    return cfg.prolog_budget_s if at.context in (PROLOG, EPILOG) else cfg.budget_s


def meeting_deadline(cfg: site.SiteConfig, started: float) -> float:
    """The meeting's end: its whole cross_node_budget_s from the prolog's start (it runs beside the local checks);
    the prolog's own prolog_budget_s comes after it, for the decision, scontrol and the record."""
    return started + cfg.cross_node_budget_s


def run(config_path: str | None = None, *, dry_run: bool = False, env: Mapping[str, str] | None = None,
        started: float | None = None, hard_exit: bool = False,
        carried: Callable[[site.SiteConfig], dict] | None = None) -> Outcome:
    """One node check. ``started``: the process's start on the monotonic clock (the budget counts from it);
    ``hard_exit``: arm the watchdog (the console script); ``carried``: what the previous runs could not keep, as
    the command reads it from the Prometheus textfile (``NOTHING_CARRIED``'s keys; None: nothing carried). A bad
    site config raises UsageError."""
    env = os.environ if env is None else env
    started = time.monotonic() if started is None else started
    cfg = site.load(config_path or site.config_path(env)[0])
    at = node_check.where(env)
    node_check.refuse_odd_name(at)  # a name SLURM never gives (a hostlist): nothing is drained for it
    if at.under_slurm:  # scontrol runs only under SLURM: as root, only a program and a slurm.conf root owns
        node_check.refuse_untrusted(cfg, env)
    budget = budget_of(cfg, at)
    bound = HardBound(at, started + budget, budget)
    if hard_exit:
        bound.arm()
    try:
        return _steps(cfg, at, env, started, budget, bound, dry_run, carried)
    finally:
        bound.disarm()


def _steps(cfg: site.SiteConfig, at: Where, env: Mapping[str, str], started: float, budget: float,
           bound: HardBound, dry_run: bool, carried: Callable[[site.SiteConfig], dict] | None) -> Outcome:
    notes: list[str] = []
    bound.stage = "the checks"
    state_box: dict = {}
    asking = threading.Thread(target=lambda: state_box.update(state=_node_state(at, cfg, env, bound)), daemon=True,
                              name="node-check-scontrol-show")
    asking.start()  # the controller's round trip beside the checks, not after them
    meeting = _meeting(cfg, at, env, meeting_deadline(cfg, started))
    fp = kept.fingerprint()
    facts_kept, why_not = kept.load(cfg.results_dir, at.node, fp) if at.context in (PROLOG, EPILOG) else (None, "")
    plan, doc = _checks(cfg, at, started, budget, facts_kept)
    bound.stage = "scontrol show node"
    asking.join(bound.remaining())
    state = state_box.get("state", slurm_node.NodeState(at.node, error="scontrol gave no answer in time")
                          if at.under_slurm else None)
    met = _met(meeting, bound)
    findings = node_check.findings_that_drain(doc, cfg.drain_on) + met.get("findings", [])
    rechecked = node_check.rechecked_by(doc, met.get("record"), at.node, cfg.drain_on)
    decision = node_check.decide(findings, state, drain_on=cfg.drain_on, rechecked=rechecked)
    done = _act(decision, at, cfg, env, bound, dry_run)
    if meeting is not None and not decision.fails and not dry_run:
        _link_comment(met.get("record"), at, cfg, env, bound, done)
    node_check.record(doc, at, cfg, decision, state, done, time.monotonic() - started)
    doc["node_check"].update(budget_s=budget, environment=fp,
                             kept_facts=None if facts_kept is None else facts_kept.get("created"),
                             kept_facts_note=why_not or None)
    if meeting is not None:
        doc["node_check"]["cross_node"] = met.get("record") or {"skipped": "the meeting did not end in time"}
    bound.stage = "keeping the record"
    if at.context == HEALTH_CHECK:
        _keep_facts(doc, plan, cfg, at, fp, notes)
    before = dict(NOTHING_CARRIED, **(carried(cfg) if carried else {}))
    if not cfg.prometheus_textfile:  # no textfile to carry the count of records not kept: the state folder does
        before.update(unkept.load(cfg.state_dir, at.node, notes))
    written = _keep_counting(doc, at, cfg, notes, before)
    if not cfg.prometheus_textfile:
        unkept.store(cfg.state_dir, at.node, doc["node_check"]["unkept_pending"], notes)
    code = (1 if decision.fails else 0) if at.context in (PROLOG, EPILOG) else int(doc["exit_code"])
    return Outcome(doc, at, decision, done, code, cfg, written, notes)


def _act(decision: Decision, at: Where, cfg: site.SiteConfig, env: Mapping[str, str], bound: HardBound,
         dry_run: bool) -> dict:
    """scontrol's drain or resume; for a failing prolog also the job's comment and its requeue (in that order: the
    requeued job carries the comment). What was done, for the record."""
    bound.fails = decision.fails
    bound.stage = f"scontrol ({decision.action})"
    if dry_run and decision.action in ("drain", "resume"):
        return {"dry_run": True}
    done = node_check.act(decision, at, cfg, env, timeout=bound.remaining())
    if at.context == PROLOG and decision.fails and at.job_id and not dry_run:
        bound.stage = "scontrol (the job's comment)"
        done["comment"] = _comment(decision, at, cfg, env, bound)
        bound.stage = "scontrol (the job's requeue)"
        done["requeue"] = _requeue(at, cfg, env, bound)
    return done


def _checks(cfg: site.SiteConfig, at: Where, started: float, budget: float, facts_kept: dict | None) -> tuple:
    """The local checks until the budget less its reserve; a prolog or epilog imports nothing heavy: the checks
    that would import torch run on the kept facts ({} when none are kept: they are skipped with a note)."""
    from ..preflight import make_plan, run_single_node

    plan = make_plan(only=cfg.only, skip=cfg.skip, config_path=cfg.path, config_data=cfg.data if cfg.path else None,
                     run_flags={"output_dir": cfg.results_dir, "nnodes": 1})
    reserve = min(RESERVE_S, 0.4 * budget)
    no_imports = at.context in (PROLOG, EPILOG)
    return plan, run_single_node(plan, deadline=started + budget - reserve, budget_s=budget,
                                 kept=(facts_kept or {}) if no_imports else None)


def _meeting(cfg: site.SiteConfig, at: Where, env: Mapping[str, str], deadline: float) -> tuple | None:
    """The opt-in cross-node meeting of a prolog (unattended/meet.py), started beside the local checks."""
    if at.context != PROLOG or not cfg.cross_node:
        return None
    from . import meet

    box: dict = {}

    def work() -> None:
        try:
            box["findings"], box["record"] = meet.meet(at, cfg, env, deadline)
        except OSError as exc:  # cross_node_key a folder, say: the meeting says why, never "did not end in time"
            box["findings"], box["record"] = [], {"skipped": f"the meeting could not start: {exc.strerror or exc} "
                                                             f"(cross_node_key {cfg.cross_node_key}?)"}

    t = threading.Thread(target=work, name="node-check-meeting", daemon=True)
    t.start()
    return t, box


def _met(meeting: tuple | None, bound: HardBound) -> dict:
    if meeting is None:
        return {}
    t, box = meeting
    t.join(bound.remaining())
    return box


def _node_state(at: Where, cfg: site.SiteConfig, env: Mapping[str, str], bound: HardBound):
    if not at.under_slurm:
        return None
    return slurm_node.show(at.node, scontrol=slurm_node.scontrol_path(cfg.scontrol, env), env=cfg.scontrol_env(env),
                           timeout=min(slurm_node.SCONTROL_TIMEOUT_S, bound.remaining()))


def _comment(decision: Decision, at: Where, cfg: site.SiteConfig, env: Mapping[str, str], bound: HardBound) -> dict:
    """What the job's user reads in `squeue -o %k` and `scontrol show job` (SLURM keeps the comment across the
    requeue): this node, the finding, that the job was requeued."""
    first = decision.findings[0] if decision.findings else None
    text = slurm_node.job_comment(at.node, first.check if first else "", first.summary if first else decision.why)
    done = slurm_node.comment(at.job_id or "", text, scontrol=slurm_node.scontrol_path(cfg.scontrol, env),
                              env=cfg.scontrol_env(env), timeout=bound.remaining())
    return {"command": done.command, "ok": done.ok, "error": done.message or None}


def _link_comment(record: dict | None, at: Where, cfg: site.SiteConfig, env: Mapping[str, str], bound: HardBound,
                  done: dict) -> None:
    """A failing link the meeting found and blamed no node for, in the job's comment (written by one node of the
    link: meet.link_commenter). The job is not failed nor requeued for it: a failing prolog drains its node (SLURM
    drains a node whose prolog exits non-zero), which would blame a node the meeting could not blame, and a requeue
    without a drain gets the same nodes and the same link again. The user whose job then ends in SLURM's
    "Communication connection failure" reads the link, and the --exclude that keeps the next job off it, in
    `squeue -o %k`; the link series alerts the admin."""
    from . import meet

    if not at.job_id or meet.link_commenter(record) != at.node:
        return
    link = record["links"][0]
    bound.stage = "scontrol (the job's comment: a failing link)"
    text = slurm_node.link_comment(link["check"], link["summary"], link["nodes"])
    out = slurm_node.comment(at.job_id, text, scontrol=slurm_node.scontrol_path(cfg.scontrol, env),
                             env=cfg.scontrol_env(env), timeout=bound.remaining())
    done["comment"] = {"command": out.command, "ok": out.ok, "error": out.message or None}


def _requeue(at: Where, cfg: site.SiteConfig, env: Mapping[str, str], bound: HardBound) -> dict:
    """The job requeued by this prolog before it exits 1, so that no line of its script runs anywhere: SLURM 22.05
    launches the batch script once the last prolog completed, a failed one too, and requeues only then (seen in 3
    of 6 runs of a 3-node job with PrologFlags=Alloc,DeferBatch). A job submitted with --no-requeue refuses: the
    exit code alone then ends it, as SLURM does."""
    done = slurm_node.requeue(at.job_id or "", scontrol=slurm_node.scontrol_path(cfg.scontrol, env),
                              env=cfg.scontrol_env(env), timeout=bound.remaining())
    return {"command": done.command, "ok": done.ok, "error": done.message or None}


def _keep(doc: dict, at: Where, cfg: site.SiteConfig, notes: list[str]) -> Path | None:
    from ..errors import UsageError

    try:
        return node_check.keep(doc, node_check.result_path(cfg, at, doc["created"]), cfg.keep)
    except UsageError as exc:
        notes.append(f"record not kept: {exc} (results_dir in the site config)")
        return None


def _keep_counting(doc: dict, at: Where, cfg: site.SiteConfig, notes: list[str], before: dict) -> Path | None:
    """The record kept, and what was not (issue 56.6): a record that cannot be written (a full disk, a folder refused)
    is counted in the Prometheus textfile (results_dir is what failed), else in the state folder (unkept.py), and
    the next record kept carries how many were not, since when and why (``node_check.records_not_kept``: a row on
    the history page)."""
    nc = doc["node_check"]
    if before["count"]:
        nc["records_not_kept"] = {"count": before["count"], "since": before["since"], "why": before["why"]}
    written = _keep(doc, at, cfg, notes)
    if written is None:
        nc.pop("records_not_kept", None)
        why = notes[-1] if notes else "not written"
        nc["record_not_kept"] = why
        nc["unkept_pending"] = {"count": before["count"] + 1, "why": before["why"] or _errno_words(why),
                                "since_s": before["since_s"] or time.time()}
    else:
        nc["unkept_pending"] = {"count": 0, "why": "", "since_s": 0.0}
    return written


def _errno_words(note: str) -> str:
    """'No space left on device' out of a 'record not kept: ...' line (a label: a short, bounded text)."""
    import re

    m = re.search(r"\(([A-Z][^()]{2,60})\)", note)
    return m.group(1) if m else note[:80]


def _keep_facts(doc: dict, plan, cfg: site.SiteConfig, at: Where, fp: str, notes: list[str]) -> None:
    """The health check's torch, CUDA and NCCL facts, for the prologs of this environment."""
    imports_of = {lc.name: tuple(lc.check.imports) for lc in plan.checks}
    try:
        facts, skipped = kept.facts_to_keep(doc, imports_of, node_check.DRAINS[cfg.drain_on] or ("fail",))
        path = kept.save(cfg.results_dir, at.node, fp, facts, doc["created"], skipped)
    except (OSError, UsageError) as exc:
        why = f"{getattr(exc, 'strerror', None) or exc}"
        notes.append(f"facts not kept for the prolog: {why}")
        doc["node_check"]["kept_facts_not_written"] = why
        return
    doc["node_check"]["kept_facts_written"] = None if path is None else str(path)
