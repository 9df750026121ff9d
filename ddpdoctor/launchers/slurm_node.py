"""SLURM's view of one node (its state and drain reason, from scontrol) and the drain and resume a node check does
on its own node, as LBNL NHC does: a drain reason that starts with the owner's prefix marks a drain this tool
wrote, so a later passing run resumes only those, never a drain an admin (or another tool) wrote.

Every scontrol call is an argv list (no shell: a reason holds spaces and quotes), has a time limit and never raises:
it returns what happened, so a controller that does not answer is a line in the node check's record, not a crash.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

OWNER = "ddpdoctor:"  # the prefix of every drain reason this tool writes (NHC writes "NHC:")
MAX_REASON = 250  # sinfo %E and scontrol show node print it whole; long enough for the path that names what broke
MAX_COMMENT = 250  # a job comment: squeue's %k shows it whole
SCONTROL_TIMEOUT_S = 10.0
# Where scontrol lives when the caller's PATH is SLURM's minimal one (a prolog runs with no PATH at all).
SCONTROL_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin")
_CAUSE = re.compile(re.escape(OWNER) + r" (?P<check>[A-Za-z0-9_.-]+)(?: \[(?P<source>[a-z-]+)\])?: ")
_STAMP = re.compile(r"\s*\[[^\]\s]*@[^\]\s]*\]\s*$")  # scontrol's " [root@2026-11-27T18:44:27]" after a reason


@dataclass(frozen=True)
class NodeState:
    """One node as scontrol shows it. ``error`` set: it could not be read (``state`` and ``reason`` unknown)."""

    name: str
    state: str = ""  # e.g. "IDLE+DRAIN", "MIXED", "DOWN+DRAIN"
    reason: str = ""  # the drain/down reason without scontrol's [user@time] stamp
    error: str | None = None

    @property
    def drained(self) -> bool:
        flags = set(self.state.upper().replace("*", "").split("+"))
        return bool(flags & {"DRAIN", "DRAINED", "DRAINING"})

    @property
    def drained_by_us(self) -> bool:
        return self.drained and self.reason.startswith(OWNER)


@dataclass(frozen=True)
class Done:
    """What one scontrol call did: ``ok``, and the command and its message for the record."""

    ok: bool
    command: list[str]
    message: str = ""


def drain_reason(check: str, finding: str, source: str = "", node: str = "") -> str:
    """'ddpdoctor: resources: /dev/shm is 64 MiB ...' (a drain by the node's own checks), 'ddpdoctor: clock-skew
    [meeting]: node3 is 5.1 s ahead ...; once fixed: scontrol update NodeName=node3 State=RESUME' (by the job's
    nodes' meeting, which no health check holds: the command an admin types is in the reason): the owner, the check,
    its source, the finding cut to fit (control characters and quotes out: sinfo prints it, admins grep it)."""
    head = f"{OWNER} {check}" + (f" [{source}]" if source else "") + ": "
    tail = f"; once fixed: scontrol update NodeName={node} State=RESUME" if source and node else ""
    room = MAX_REASON - len(head) - len(tail)
    text = _one_line(finding)
    return _one_line(head) + " " + (text if len(text) <= room else text[: room - 3].rstrip() + "...") + tail


def drain_cause(reason: str) -> tuple[str, str]:
    """(the check, the source: "" for the node's own checks) of a reason ``drain_reason`` wrote; ("", "") for one
    it cannot read (a reason of another version, cut short): such a drain is re-checked by nothing."""
    m = _CAUSE.match(reason or "")
    return (m["check"], m["source"] or "") if m else ("", "")


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return "".join(c for c in text if c.isprintable() and c not in "\"'`\\")


def scontrol_path(configured: str = "scontrol", env: Mapping[str, str] | None = None) -> str:
    """The scontrol to run: a configured absolute path as it is, else found on PATH, else in SLURM's usual
    directories (a prolog's environment has no PATH)."""
    if os.path.isabs(configured):
        return configured
    path = (env or os.environ).get("PATH") or os.pathsep.join(SCONTROL_DIRS)
    return shutil.which(configured, path=path) or shutil.which(configured, path=os.pathsep.join(SCONTROL_DIRS)) \
        or configured


def _run(argv: list[str], env: Mapping[str, str] | None, timeout: float) -> tuple[int | None, str, str]:
    """(exit code or None, stdout, a message: stderr, or why it did not run)."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=dict(env) if env else None,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", f"`{' '.join(argv[1:3])}` gave no answer within {timeout:g} s"
    except OSError as exc:
        return None, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
    return p.returncode, p.stdout, (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}")[:500]


def show(node: str, *, scontrol: str = "scontrol", env: Mapping[str, str] | None = None,
         timeout: float = SCONTROL_TIMEOUT_S) -> NodeState:
    """`scontrol show node -o NODE`, parsed: its state flags and reason."""
    code, out, message = _run([scontrol, "show", "node", "-o", node], env, timeout)
    return parse_show(node, out) if code == 0 else NodeState(node, error=message[:300])


def parse_show(node: str, text: str) -> NodeState:
    """One node's `scontrol show node -o` line: ``State=IDLE+DRAIN ... Reason=why it is [root@2026-11-27T18:44:27]``
    (the reason holds spaces: it runs to the end of the line, or to the next key scontrol prints after it)."""
    line = next((ln for ln in text.splitlines() if ln.startswith(f"NodeName={node} ")), text.strip())
    state = re.search(r"(?:^|\s)State=(\S+)", line)
    if state is None:
        return NodeState(node, error=f"no State= in scontrol's answer: {line[:120]!r}")
    reason = ""
    found = re.search(r"(?:^|\s)Reason=(.*)$", line)
    if found:
        reason = re.split(r"\s(?:Comment|Extra|ResumeAfterTime)=", found.group(1))[0]
        reason = _STAMP.sub("", reason).rstrip()  # leading spaces kept: "  ddpdoctor: x" is not our prefix
    return NodeState(node, state.group(1), "" if reason in ("(null)", "none") else reason)


def job_comment(node: str, check: str, finding: str) -> str:
    """The job's comment when a node's prolog fails it: 'ddpdoctor: node3 failed its prolog (resources: /dev/shm is
    64 MiB ...); the job was requeued without it' (one line, no quotes, cut as a reason is)."""
    what = f"{check}: {finding}" if check else finding
    text = _one_line(f"{OWNER} {node} failed its prolog ({what}); the job was requeued")
    return text if len(text) <= MAX_COMMENT else text[: MAX_COMMENT - 3].rstrip() + "..."


def link_comment(check: str, finding: str, nodes: list[str]) -> str:
    """The job's comment when its prologs' meeting finds a link failing and blames no node: 'ddpdoctor: the meeting
    of the job nodes found mesh: link node1 -> node3 timed out (TCP to ADDR:PORT); no node drained (a link names two
    nodes); not requeued (same nodes, same link): resubmit with --exclude=node3 (or node1)' (no quotes: as
    job_comment). Cut to fit in the finding, never in the advice after it."""
    advice = "; no node drained (a link names two nodes); not requeued (same nodes, same link)"
    if len(nodes) == 2:
        advice += f": resubmit with --exclude={nodes[1]} (or {nodes[0]})"
    head = f"{OWNER} the meeting of the job nodes found {check}: "
    room = MAX_COMMENT - len(head) - len(advice)
    said = _one_line(finding)
    said = said if len(said) <= room else said[: max(0, room - 3)].rstrip() + "..."
    text = _one_line(head + said + advice)
    return text if len(text) <= MAX_COMMENT else text[: MAX_COMMENT - 3].rstrip() + "..."


def comment(job_id: str, text: str, *, scontrol: str = "scontrol", env: Mapping[str, str] | None = None,
            timeout: float = SCONTROL_TIMEOUT_S) -> Done:
    """`scontrol update JobId=ID Comment=TEXT`: what the job's user sees in `squeue -o %k` and `scontrol show
    job` (and `sacct -o Comment` where accounting stores comments)."""
    argv = [scontrol, "update", f"JobId={job_id}", f"Comment={text}"]
    code, _, message = _run(argv, env, timeout)
    return Done(code == 0, argv, "" if code == 0 else message)


def requeue(job_id: str, *, scontrol: str = "scontrol", env: Mapping[str, str] | None = None,
            timeout: float = SCONTROL_TIMEOUT_S) -> Done:
    """`scontrol requeue ID`, from a failing node's prolog before it exits: SLURM 22.05 launches the batch script
    when the last prolog completes, a failed one included, and requeues only after (with DeferBatch too): a job
    already requeued is not launched ("already killed, do not launch batch job")."""
    argv = [scontrol, "requeue", job_id]
    code, _, message = _run(argv, env, timeout)
    return Done(code == 0, argv, "" if code == 0 else message)


def drain(node: str, reason: str, *, scontrol: str = "scontrol", env: Mapping[str, str] | None = None,
          timeout: float = SCONTROL_TIMEOUT_S) -> Done:
    """`scontrol update NodeName=NODE State=DRAIN Reason=REASON` (a job running there finishes; no new one starts)."""
    argv = [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]
    code, _, message = _run(argv, env, timeout)
    return Done(code == 0, argv, "" if code == 0 else message)


def resume(node: str, *, scontrol: str = "scontrol", env: Mapping[str, str] | None = None,
           timeout: float = SCONTROL_TIMEOUT_S) -> Done:
    """`scontrol update NodeName=NODE State=RESUME`: call it only for a node ``drained_by_us``."""
    argv = [scontrol, "update", f"NodeName={node}", "State=RESUME"]
    code, _, message = _run(argv, env, timeout)
    return Done(code == 0, argv, "" if code == 0 else message)
