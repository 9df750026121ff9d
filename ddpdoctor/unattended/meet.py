"""The opt-in cross-node step of a multi-node job's prolog: the job's nodes meet, as preflight's nodes do, for
what no node sees alone (reachability on the job's port, names, clock skew, software parity), authenticated with a
site key, within the site's budget; each node learns which node is wrong, and only a node a failing result names
alone, or the one node every failing link names, fails its prolog (and so drains).

Every prolog of the job runs `ddpdoctor preflight --hosts <the job's nodes> --master <first>:<port>` with the
cluster checks that say they belong here (Check.cross_node; torch's TCPStore is the meeting point, so the child
imports torch; no collective) and a per-job token, HMAC-SHA256(site key, job id): a node of another
job, or anyone who reaches the port, cannot join, and a token seen once is worth nothing for the next job. The site
key is read only from a regular file root owns and no one else can read or write (opened without following links).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import stat
import subprocess
import time
from typing import Mapping

from ..cluster.local import child_python
from .node_check import MEETING as FROM_MEETING
from .node_check import Finding, Where
from .site import SiteConfig

MAX_KEY_BYTES = 4096
MEETING = "cross-node"  # the check a finding of the meeting itself (not of one of its checks) is recorded under
AFTER_JOIN_S = 3.5  # the meeting's work after the join: mesh (1 s connects), names, clock-skew (4 samples), verdict
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The meeting's probes answer within its budget: a node whose links are down is judged, not waited for
SHORT = ("--set", "mesh.connect_timeout_s=1", "--set", "clock-skew.reply_timeout_s=1", "--set", "clock-skew.samples=4")


def site_key(path: str) -> bytes:
    """The key's bytes; ValueError naming why it is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"cross_node_key {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
            raise ValueError(f"cross_node_key {path}: refused (a regular file root owns, mode 0600 or stricter)")
        key = f.read(MAX_KEY_BYTES + 1).strip()
    if not 16 <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(f"cross_node_key {path}: refused (16 to {MAX_KEY_BYTES} bytes of key expected)")
    return key


def job_token(key: bytes, job_id: str) -> str:
    return hmac.new(key, f"ddpdoctor-prolog:{job_id}".encode(), hashlib.sha256).hexdigest()


def job_nodes(env: Mapping[str, str]) -> list[str]:
    from ..launchers.hostlists import expand_slurm_nodelist

    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    return expand_slurm_nodelist(nodelist) if nodelist else []


def meet(at: Where, cfg: SiteConfig, env: Mapping[str, str], deadline: float) -> tuple[list[Finding], dict]:
    """(the findings that fail this node, the record of the meeting). Nothing to do for a one-node job; a meeting
    that could not happen (no key, a node that never came, the budget spent) is recorded, never a finding: the
    per-node checks stand, and a missing peer is that peer's prolog's business."""
    try:
        nodes = job_nodes(env)
    except Exception as exc:  # noqa: BLE001 - a nodelist we cannot read: no meeting, said
        return [], {"skipped": f"SLURM_JOB_NODELIST not read: {exc}"}
    if len(nodes) < 2 or at.node not in nodes or not at.job_id or not at.job_id.isdigit():
        return [], {"skipped": "not a multi-node job with this node in it", "needed": False}
    try:
        token = job_token(site_key(cfg.cross_node_key), at.job_id)
    except ValueError as exc:
        return [], {"skipped": str(exc)}
    checks, judges = meeting_checks()
    if not judges:
        return [], {"skipped": "no installed check is a cross-node one (Check.cross_node with phase cluster)"}
    budget = max(1.0, deadline - time.monotonic())
    port = cfg.cross_node_port + int(at.job_id) % 1000
    argv = [*child_python(isolated=True), "preflight", "--hosts", ",".join(nodes), "--master", f"{nodes[0]}:{port}",
            "--only", ",".join(checks), "--timeout", f"{join_window(budget):.1f}", "--json", "--no-save",
            *SHORT]
    record: dict = {"nodes": nodes, "port": port, "checks": checks}
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=budget,
                           env=child_env(token), cwd="/", stdin=subprocess.DEVNULL)
        doc = json.loads(p.stdout)
    except subprocess.TimeoutExpired:
        return [], dict(record, skipped=f"the nodes did not meet within {budget:.0f} s")
    except ValueError:
        said = " ".join((p.stderr or "").split())
        record = dict(record, skipped=f"no result (exit {p.returncode}): {said[-300:]}")
        from ..cluster.join import NO_TORCH

        if NO_TORCH in said:  # this node's own fault, whatever its peers do: its jobs would die on the same import
            return [Finding(MEETING, "fail", said[said.index(NO_TORCH):][:400], FROM_MEETING)], record
        crashed = crash_of(p.returncode)
        if crashed:
            return [Finding(MEETING, "fail", crashed, FROM_MEETING)], record
        return [], record
    return mine(doc, at.node, judges), dict(record, verdict=doc.get("verdict"), exit_code=p.returncode,
                                    results=[{k: r.get(k) for k in ("check", "level", "summary", "nodes")}
                                             for r in doc.get("results") or [] if r.get("level") in ("warn", "fail", "skip")],
                                    links=failing_links(doc, judges),
                                    blamed=sorted(n for n in nodes if mine(doc, n, judges)))


# The signals a Python process dies of when native code it loaded crashed (a truncated or mismatched library,
# a broken CPU feature): this node's own fault, as an import that fails. Not SIGKILL (the OOM killer, our own
# budget), SIGTERM/SIGINT (a stop), nor SIGABRT (torch's own abort on an error it reports).
CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)


def crash_of(returncode: int | None) -> str | None:
    """What the meeting's child dying of a native crash says of this node, or None."""
    if returncode is None or -returncode not in CRASH_SIGNALS:
        return None
    name = signal.Signals(-returncode).name
    return (f"this node cannot join: the meeting's child (python -m ddpdoctor preflight, which imports torch) died "
            f"of {name} here, as a job's `import torch` would; fix: run `python -c 'import torch'` in the job's "
            "environment on this node, then `python -m pip install --force-reinstall torch` there")


def meeting_checks(installed: Mapping | None = None) -> tuple[list[str], frozenset[str]]:
    """(the checks the meeting runs, those of them whose failing results may blame a node there): every installed
    check that says it belongs in the meeting (``Check.cross_node``, plugins included), and of them the cluster
    ones. The engine names none: a plugin's check joins the meeting by setting the attribute."""
    if installed is None:
        from ..registry import installed as discovered

        installed = discovered()
    ours = {name: check for name, check in installed.items() if getattr(check, "cross_node", False)}
    return sorted(ours), frozenset(n for n, c in ours.items() if getattr(c, "phase", "local") == "cluster")


def join_window(budget: float) -> float:
    """The child's --timeout: how long from its own start its nodes may take to join (the master waits for them,
    a worker retries its connection until then), out of the meeting's ``budget``. Most of it: a node's interpreter
    and its `import torch` (for the TCPStore) come first, 1.2-1.6 s of CPU, several seconds of a busy node's (and
    the three children of a job start at once), so a window of half the budget left a loaded worker no attempt
    before it passed; what follows the join (mesh's 1 s connects, clock-skew's samples, the verdict) gets the rest."""
    return max(1.0, budget - min(AFTER_JOIN_S, 0.4 * budget))


def child_env(token: str) -> dict[str, str]:
    """The meeting child's whole environment: nothing of the job's (its PATH, PYTHON*, LD_*, SLURM_* are the job's
    user's, and the child runs as root), only a fixed PATH, a locale, root's home and the job's token."""
    import pwd

    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = "/"
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": home, "DDPDOCTOR_TOKEN": token}


def mine(doc: dict, node: str, judges: frozenset[str] | None = None) -> list[Finding]:
    """The failing results that make this node the wrong one: those that name it alone, and, where several failing
    results name two nodes each (links), the one node they all name, when that is this node (node3 unreachable from
    node1 and from node2). A single failing link between two nodes blames neither: a false drain costs as much
    trust as a missed fault."""
    fails = [r for r in doc.get("results") or [] if r.get("level") == "fail" and isinstance(r.get("nodes"), list)
             and (judges is None or r.get("check") in judges)]
    out = [Finding(str(r.get("check")), "fail", str(r.get("summary") or ""), FROM_MEETING) for r in fails
           if r["nodes"] == [node]]
    shared = [r for r in fails if len(r["nodes"]) > 1]
    common = set.intersection(*(set(r["nodes"]) for r in shared)) if len(shared) >= 2 else set()
    if common == {node}:
        first = shared[0]
        out.append(Finding(str(first.get("check")), "fail", f"{node} is the node common to {len(shared)} failing "
                           f"results of the job's nodes: {first.get('summary')}", FROM_MEETING))
    return out


def failing_links(doc: dict, judges: frozenset[str] | None = None) -> list[dict]:
    """The failing results of the meeting's cluster checks that name two nodes (a link: mesh's 'link node1 -> node3
    timed out (TCP to ADDR:PORT)' says both nodes, the port and what answered), in the document's order: what the
    job's comment and the link series say where no node is to blame."""
    links = [r for r in doc.get("results") or [] if r.get("level") == "fail" and isinstance(r.get("nodes"), list)
             and len(r["nodes"]) == 2 and (judges is None or r.get("check") in judges)]
    return [{"check": str(r.get("check")), "nodes": [str(n) for n in r["nodes"]],
             "summary": str(r.get("summary") or "")} for r in links]


def link_commenter(record: dict | None) -> str | None:
    """The node that writes the job's comment about a failing link: the first node of the first link, and only when
    the meeting blames no node (a blamed node's failing prolog writes its own comment, and requeues the job)."""
    if not record or record.get("blamed") or not record.get("links"):
        return None
    return record["links"][0]["nodes"][0]
