"""The unattended node check: this node's single-node preflight within a time budget, the drain or resume it decides
for its own node in SLURM's context (Prolog=, Epilog=, HealthCheckProgram=), and the record it keeps of each run.

Data first: ``where`` reads SLURM's context from the environment, ``decide`` is a pure function of the findings and
the node's state, ``act`` runs scontrol (launchers/slurm_node.py) and ``keep`` writes the record. unattended/entry.py
runs them in order within the budget; the command (cli/node_check_cmd.py) renders what it did.
"""
from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

from ..launchers import slurm_node
from ..runner import TOOL_ERROR
from .site import SiteConfig

PROLOG, EPILOG, HEALTH_CHECK, MANUAL = "prolog", "epilog", "health_check", "manual"
SCRIPT_CONTEXTS = {"prolog_slurmd": PROLOG, "epilog_slurmd": EPILOG}  # SLURM_SCRIPT_CONTEXT (slurmd's scripts)
DRAINS = {"fail": ("fail",), "warn": ("fail", "warn"), "never": ()}
JOB_ID = re.compile(r"[0-9]{1,20}", re.ASCII)  # SLURM's job ids: a number (an array task's too)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # one host's name: no hostlist, space or control


@dataclass(frozen=True)
class Where:
    """Where and why this run happens: SLURM's context, its name for this node, the job (prolog/epilog)."""

    context: str
    node: str
    job_id: str | None = None

    @property
    def under_slurm(self) -> bool:
        return self.context != MANUAL


def where(env: Mapping[str, str], hostname: str | None = None) -> Where:
    """From slurmd's environment: a prolog or epilog has SLURM_SCRIPT_CONTEXT (and the job's id; before SLURM 21.08
    only the id), a health check only SLURMD_NODENAME; anything else is a person's run, a job's own steps and batch
    script included (they have SLURM_STEP_ID or SLURM_SUBMIT_DIR, which slurmd never gives its scripts): run inside
    a job by hand, it must not drain the node as a prolog would."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None
    node = env.get("SLURMD_NODENAME") or (hostname or socket.gethostname()).split(".")[0]
    context = SCRIPT_CONTEXTS.get(env.get("SLURM_SCRIPT_CONTEXT", ""))
    in_a_job = "SLURM_STEP_ID" in env or "SLURM_SUBMIT_DIR" in env
    if context is None and env.get("SLURMD_NODENAME") and not in_a_job:
        context = PROLOG if job else HEALTH_CHECK
    return Where(context or MANUAL, node, job)


def refuse_odd_name(at: Where) -> None:
    """A node name SLURM never gives (a hostlist ``n[1-3]`` or ``n1,n2``, a space, a newline): UsageError, never an
    ``scontrol update NodeName=`` that would drain every node it expands to; a job id that is not ASCII digits
    (``4242,5000`` would comment and requeue job 5000 too, ``²³`` passes str.isdigit)."""
    from ..errors import UsageError
    from ..text import safe_text

    if at.under_slurm and not NODE_NAME.fullmatch(at.node):
        raise UsageError(f"SLURMD_NODENAME {safe_text(at.node)[:100]!r} is not one node's name (letters, digits, "
                         "'.', '_', '-'): nothing drained or resumed")
    if at.under_slurm and at.job_id is not None and not JOB_ID.fullmatch(at.job_id):
        raise UsageError(f"SLURM_JOB_ID {safe_text(at.job_id)[:100]!r} is not one job's id (ASCII digits): no job "
                         "commented or requeued, nothing drained or resumed")


NODE, MEETING = "", "meeting"  # a finding's source: this node's own checks, or the job's nodes' meeting


@dataclass(frozen=True)
class Finding:
    check: str
    level: str
    summary: str
    source: str = NODE


@dataclass
class Decision:
    """What this run does about the node. ``action``: "drain" (or update our own reason), "resume" (a drain we wrote,
    now passing), "keep" (our drain stands with the same reason), "leave" (someone else's drain: never touched),
    "unread" (scontrol could not say: nothing is changed on a guess), "none"; ``fails``: the job must not start
    here (a prolog's non-zero exit)."""

    action: str
    why: str
    reason: str | None = None
    findings: list[Finding] = field(default_factory=list)
    fails: bool = False


def findings_that_drain(doc: dict, drain_on: str) -> list[Finding]:
    """The results at a draining level, worst first (the document's order); a check's own failure (it raised or
    hung: ``tool_error``) never drains a node: a bug in a check must not empty the cluster."""
    levels = DRAINS[drain_on]
    return [Finding(r["check"], r["level"], r["summary"]) for r in doc.get("results", [])
            if r.get("level") in levels and not (r.get("details") or {}).get(TOOL_ERROR)]


def decide(findings: list[Finding], state: slurm_node.NodeState | None, *, drain_on: str = "fail",
           rechecked: frozenset = frozenset()) -> Decision:
    """Pure: the findings that drain, the node's state (None: not under SLURM, nothing to act on) and what this run
    re-measured and found well (``rechecked``: (check, source) pairs, ``rechecked_by``): our drain is lifted only
    when its own cause is among them. A health check holds no meeting: a drain by the meeting stays through it (no
    drain, resume, drain loop), for a later meeting or the admin's command its reason names."""
    if state is None:
        return Decision("none", "not under SLURM: nothing to drain or resume", findings=findings,
                        fails=bool(findings))
    if state.error:  # a busy slurmctld ("Socket timed out"): an unread state is no evidence of anything
        return Decision("unread", f"the node's state could not be read ({state.error}): nothing drained or resumed",
                        findings=findings, fails=bool(findings))
    if findings:
        first = findings[0]
        reason = slurm_node.drain_reason(first.check, first.summary, first.source, state.name)
        if state.drained and not state.drained_by_us:
            return Decision("leave", f"already drained by someone else ({state.reason or 'no reason'}): left as it "
                            "is", reason, findings, fails=True)
        if state.drained_by_us and state.reason == reason:
            return Decision("keep", "already drained by ddpdoctor for the same finding", reason, findings, True)
        return Decision("drain", f"{first.check} {first.level}s", reason, findings, fails=True)
    if state.drained_by_us:
        check, source = slurm_node.drain_cause(state.reason)
        if (check, source) in rechecked:
            return Decision("resume", f"{check} re-checked and passing now; ddpdoctor drained it ({state.reason})")
        by = "the job's nodes' meeting" if source == MEETING else "this node's checks"
        return Decision("keep", f"passing, but what drained it ({check or 'a reason of another version'}, found by "
                        f"{by}) was not re-checked in this run: the drain stands ({state.reason})", state.reason)
    if state.drained:
        return Decision("leave", f"passing, but drained by someone else ({state.reason or 'no reason'}): left as "
                        "it is")
    return Decision("none", "passing" if drain_on != "never" else "passing (drain_on = never)")


def rechecked_by(doc: dict, meeting: dict | None, node: str, drain_on: str) -> frozenset:
    """The (check, source) pairs this run measured and found below the draining level: its own checks' results
    (not skipped, not the tool's own failure), and, where the job's nodes met, the meeting's checks that named no
    failing result with this node in it."""
    levels = DRAINS[drain_on]
    out = {(r["check"], NODE) for r in doc.get("results", []) if r.get("level") not in (*levels, "skip")
           and not (r.get("details") or {}).get(TOOL_ERROR)}
    if meeting and meeting.get("verdict") is not None:
        failing = {r.get("check") for r in meeting.get("results") or [] if r.get("level") == "skip"
                   or (r.get("level") in levels and node in (r.get("nodes") or []))}
        out |= {(c, MEETING) for c in meeting.get("checks") or [] if c not in failing}
    return frozenset(out)


def act(decision: Decision, at: Where, site: SiteConfig, env: Mapping[str, str],
        timeout: float = slurm_node.SCONTROL_TIMEOUT_S) -> dict:
    """Run the decision's scontrol command on this node (within ``timeout``); what was done, for the record."""
    if decision.action not in ("drain", "resume"):
        return {}
    kw = {"scontrol": slurm_node.scontrol_path(site.scontrol, env), "env": site.scontrol_env(env),
          "timeout": min(timeout, slurm_node.SCONTROL_TIMEOUT_S)}
    if decision.action == "drain":
        done = slurm_node.drain(at.node, decision.reason or "ddpdoctor: failed", **kw)
    else:
        done = slurm_node.resume(at.node, **kw)
    return {"command": done.command, "ok": done.ok, "error": done.message or None}


def refuse_untrusted(site: SiteConfig, env: Mapping[str, str]) -> None:
    """As root, the programs and files the site config names must be root's too (UsageError, one line): root runs
    scontrol and scontrol reads slurm.conf."""
    from .. import trust

    program = slurm_node.scontrol_path(site.scontrol, env)
    if os.path.lexists(program):  # one not found is not run: its state unread, nothing changes
        trust.guard_file(program, "scontrol (node-check.scontrol)")
    if site.slurm_conf:
        trust.guard_file(site.slurm_conf, "node-check.slurm_conf")


def record(doc: dict, at: Where, site: SiteConfig, decision: Decision, state, done: dict, elapsed_s: float) -> dict:
    """The document with its ``node_check`` section (SCHEMA.md): context, decision, the node's state before, what
    scontrol did."""
    doc["node_check"] = {
        "context": at.context, "node": at.node, "job_id": at.job_id, "config": site.path,
        "budget_s": site.budget_s, "elapsed_s": round(elapsed_s, 3), "drain_on": site.drain_on,
        "action": decision.action, "why": decision.why, "reason": decision.reason,
        "findings": [asdict(f) for f in decision.findings],
        "state_before": None if state is None else {"state": state.state, "reason": state.reason,
                                                     "error": state.error},
        "scontrol": done or None,
    }
    return doc


def result_path(site: SiteConfig, at: Where, created: str) -> Path:
    """RESULTS_DIR/<node>/<UTC time>-<context>[-<job>].json: one file per run, a node's in time order by name."""
    from ..documents import results_dir_name

    stamp = created.replace("-", "").replace(":", "").replace("+0000", "Z").replace("+00:00", "Z")
    job = f"-{results_dir_name(at.job_id)}" if at.job_id else ""
    return Path(site.results_dir) / results_dir_name(at.node) / f"{stamp}-{time.time_ns() % 10**9:09d}-" \
        f"{at.context}{job}.json"


def keep(doc: dict, path: Path, keep_n: int) -> Path:
    """Write the record atomically, then remove the node's oldest beyond ``keep_n`` (pruned in batches of a tenth,
    so a run lists its folder rarely). results_dir is opened once (made, each level 0755 whatever the umask), the
    node's folder by its descriptor, never through a link; as root both must be root's alone (UsageError): a user
    who can write results_dir, its parent or the node's folder could swap the node's folder for a link to root's
    files."""
    import json

    from .. import trust
    from ..documents import write_error
    from ..errors import UsageError
    from ..text import no_surrogates

    try:
        fd = trust.open_dirs(path.parent.parent, [path.parent.name], "node-check.results_dir", create=True)
    except OSError as exc:
        raise UsageError(f"node-check.results_dir {path.parent}: cannot be opened ({exc.strerror or exc}); a "
                         "link is never followed there") from None
    try:
        text = json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n"
        trust.write_at(fd, path.name, no_surrogates(text).encode("utf-8"))
        try:
            _prune(fd, keep_n)
        except OSError:
            pass  # pruning is housekeeping: a record written is what counts
    except OSError as exc:
        raise write_error(path, exc) from None
    finally:
        os.close(fd)
    return path


def _prune(fd: int, keep_n: int) -> None:
    """The oldest records beyond ``keep_n`` removed through the node folder's descriptor: never through a link."""
    names = [n for n in os.listdir(fd) if n.endswith(".json") and not n.startswith(".")]
    if len(names) > keep_n + max(1, keep_n // 10):
        for old in sorted(names)[: len(names) - keep_n]:
            try:
                os.unlink(old, dir_fd=fd)  # a link named *.json goes, never what it points to
            except (FileNotFoundError, IsADirectoryError, PermissionError):
                continue
