"""Diagnosis benchmark: inject every failure ddpdoctor claims to catch, for real, and score what it says.

    python tests/benchmarks/bench_diagnosis.py                    # every scenario this machine can run
    python tests/benchmarks/bench_diagnosis.py --only preflight   # one tool (or scenario names, comma-separated)
    python tests/benchmarks/bench_diagnosis.py --only shapes      # issue 30's job shapes, run-trainer + postmortem
    python tests/benchmarks/bench_diagnosis.py --only libraries   # issue 37's library jobs x faults x tools
    python tests/benchmarks/bench_diagnosis.py --json diag.json   # the table and totals as JSON too

Each scenario is a real fault on simulated nodes (processes on 127.0.0.x, or hosts in network namespaces
on a private bridge) or ranks (run-trainer, nccl-bench) with the diagnosis it must produce: the node(s) or
rank(s) to name, words that say the class, and a fix. A hit is the right nodes, the right class and a fix,
with no other node blamed; a healthy scenario is a hit when nothing fails. Time to verdict runs from the
fault (or the start, for a misconfiguration) to the reporting process's exit.

Needs root for namespaces and iptables, faketime for the clock scenario; GPU scenarios run only where a
GPU is present. Every scenario is bounded in time and cleans up what it made (processes, namespaces).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.integration: the same fabric and user script the tests use

ADDR = re.compile(r"\b(?:127\.0\.0|198\.18\.0)\.\d{1,3}\b")
RANK = re.compile(r"\brank(?:\(s\))? (\d+)")
SCENARIO_LIMIT_S = 180.0


# ----------------------------------------------------------------------------------------------------
# What a run said: findings with the ids they blame.


@dataclass
class Finding:
    level: str  # fail / warn / exit3 (the cluster did not assemble) / root (a post-mortem's root cause)
    ids: set[str]  # addresses (127.0.0.3) or "rank N"
    text: str
    fix: str


@dataclass
class Outcome:
    findings: list[Finding]
    seconds: float
    exit_code: int | None
    note: str = ""


@dataclass
class Scenario:
    name: str
    tool: str  # preflight | nccl-bench | run-trainer | postmortem
    fault: str  # the class of failure, as the catalogue names it
    expect_ids: set[str] | None  # None: healthy, nothing may fail; empty set: a cluster-wide cause
    expect_words: str  # regex the blaming finding's text must match
    run: Callable[["Ctx"], Outcome]
    needs: tuple[str, ...] = ()
    expect_level: tuple[str, ...] = ("fail", "exit3", "root")
    group: str = ""  # --only selects by name, tool or group ("shapes": issue 30's job shapes)


@dataclass
class Row:
    scenario: str
    tool: str
    fault: str
    expected: str
    got: str
    hit: bool
    false_alarm: bool
    seconds: float
    note: str = ""


class Ctx:
    """A scratch directory and a list of processes/namespaces to clean up, per scenario."""

    def __init__(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ddpd-diag-"))
        self.procs: list[subprocess.Popen] = []
        self.cleanups: list[Callable[[], None]] = []

    def close(self) -> None:
        import psutil

        for p in self.procs:  # descendants first: a rank may run in a session of its own
            try:
                for child in psutil.Process(p.pid).children(recursive=True):
                    child.kill()
            except psutil.Error:
                pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.communicate(timeout=30)
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def free_port() -> int:
    from ddpdoctor.cluster.local import free_port as fp

    return fp()


def env_with(extra: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("DDPDOCTOR_TOKEN", None)
    env.update(extra or {})
    return env


# ----------------------------------------------------------------------------------------------------
# Reading documents into findings.


def preflight_findings(doc: dict | None, stderr: str, code: int | None) -> list[Finding]:
    out: list[Finding] = []
    if doc:
        addr_of = {name: (n or {}).get("addr") or name for name, n in (doc.get("nodes") or {}).items()}
        for r in doc.get("results", []):
            if r["level"] not in ("fail", "warn"):
                continue
            ids = {addr_of.get(n, n) for n in r.get("nodes") or []}
            text = f"{r['check']}: {r['summary']}"
            if r["check"] == "cluster" or not ids:  # a node outside the roster is named by its address only
                ids |= set(ADDR.findall(text))
            out.append(Finding(r["level"], {i for i in ids if i}, text, r.get("fix") or ""))
    if code == 3:
        line = next((ln for ln in reversed(stderr.splitlines()) if ln.startswith("Error:")), stderr[-300:])
        missing = re.search(r"missing rank\(s\) ([\d, ]+)", line)
        ids = {f"rank {r.strip()}" for r in missing.group(1).split(",") if r.strip()} if missing else set()
        if not ids:
            ids = set(ADDR.findall(line.split("Joined:")[0]))
        fix = line.split("fix:", 1)[-1] if "fix:" in line.lower() else ""
        out.append(Finding("exit3", ids, line, fix))
    return out


def trainer_findings(doc: dict | None) -> list[Finding]:
    if not doc:
        return []
    rc = doc.get("root_cause")
    if not rc:
        return []
    hang = ((doc.get("hang") or {}).get("verdict") or {})
    ranks = {f"rank {c['rank']}" for c in hang.get("culprits") or [] if c.get("rank") is not None}
    if not ranks and rc.get("rank") is not None:
        ranks = {f"rank {rc['rank']}"}
    text = " ".join(str(x) for x in (rc.get("category"), rc.get("error_type"), hang.get("class"), rc.get("signal"),
                                     rc.get("message"), rc.get("location")) if x)
    return [Finding("root", ranks, text, rc.get("fix") or "")]


def score(sc: Scenario, out: Outcome) -> Row:
    blaming = [f for f in out.findings if f.level in ("fail", "exit3", "root")]
    if sc.expect_ids is None:
        # postmortem's "not verified" (exit 5) is right where the records show no normal end (issue 45)
        hit = not blaming and (out.exit_code == 0 or (sc.tool == "postmortem" and out.exit_code == 5))
        got = "; ".join(f"{f.level} {sorted(f.ids)}: {f.text[:70]}" for f in blaming) or f"clean (exit {out.exit_code})"
        return Row(sc.name, sc.tool, sc.fault, "no failure", got, hit, bool(blaming), round(out.seconds, 1), out.note)
    words = re.compile(sc.expect_words, re.I)
    # the findings that say the right thing with a fix; together they must name every expected node
    good = [f for f in out.findings if f.level in sc.expect_level and words.search(f.text) and f.fix
            and (f.ids & sc.expect_ids or not sc.expect_ids)]
    covered = set().union(*(f.ids for f in good)) if good else set()
    # blame: every failing finding's nodes, except the addresses a cluster-wide finding merely mentions
    blamed = set().union(*(f.ids for f in blaming if sc.expect_ids or f not in good)) if blaming else set()
    others = {i for i in blamed - sc.expect_ids if i.startswith(("127.", "198.", "rank", "node"))}
    hit = bool(good) and sc.expect_ids <= covered and not others
    shown = good[0] if good else (blaming[0] if blaming else None)
    got = f"{shown.level} {sorted(covered or shown.ids)}: {shown.text[:90]}" if shown else \
        f"nothing (exit {out.exit_code}) {out.note}"
    if others:
        got += f" | also blamed {sorted(others)}"
    return Row(sc.name, sc.tool, sc.fault, f"{sorted(sc.expect_ids) or 'cluster-wide'} /{sc.expect_words}/", got,
               hit, bool(others), round(out.seconds, 1), out.note)


# ----------------------------------------------------------------------------------------------------
# Preflight on loopback: one process per node on 127.0.0.N.

ONLY = "mesh,clock-skew,names,parity,launch-args,collective,env-vars,packages,shared-dir"


def node_argv(rank: int, nnodes: int, port: int, timeout: float, *extra: str, master_rank_addr="127.0.0.1",
              local=True) -> list[str]:
    argv = [sys.executable, "-m", "ddpdoctor", "preflight", "--master", f"{master_rank_addr}:{port}", "--nnodes",
            str(nnodes), "--node-rank", str(rank), "--timeout", str(timeout), "--json", "--only", ONLY, *extra]
    if local:
        argv += ["--local-addr", f"127.0.0.{rank + 1}"]
    return argv


def start(ctx: Ctx, argv: list[str], env: dict | None = None, prefix: tuple = ()) -> subprocess.Popen:
    p = subprocess.Popen([*prefix, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env_with(env), start_new_session=True)
    ctx.procs.append(p)
    return p


def finish(p: subprocess.Popen, limit: float) -> tuple[int | None, dict | None, str]:
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        return None, None, err + "\n[bench] killed at the scenario limit"
    try:
        doc = json.loads(out) if out.strip() else None
    except json.JSONDecodeError:
        doc = None
    return p.returncode, doc, err


def cluster(ctx: Ctx, n: int = 3, timeout: float = 15, per_node: Callable[[int], dict] | None = None,
            absent: tuple[int, ...] = (), after_join: Callable[[list], None] | None = None,
            report_rank: int = 0) -> Outcome:
    """Start n nodes (per_node(rank) -> {"extra": [...], "env": {...}, "prefix": (...)}); optionally act on
    them once the report node's peers have joined; the outcome is the report node's."""
    port = free_port()
    procs: dict[int, subprocess.Popen] = {}
    start_t = time.monotonic()
    for r in range(n):
        if r in absent:
            continue
        spec = (per_node or (lambda _r: {}))(r)
        procs[r] = start(ctx, node_argv(r, n, port, timeout, *spec.get("extra", ())), spec.get("env"),
                         spec.get("prefix", ()))
    fault_t = start_t
    if after_join is not None:
        fault_t = after_join(procs) or time.monotonic()
    code, doc, err = finish(procs[report_rank], SCENARIO_LIMIT_S)
    elapsed = time.monotonic() - fault_t
    for r, p in procs.items():
        if r != report_rank:
            finish(p, 60)
    return Outcome(preflight_findings(doc, err, code), elapsed, code)


def wait_line(p: subprocess.Popen, needle: str, limit: float = 60) -> bool:
    """Read a node's stderr until a progress line appears (bounded); the rest stays readable later."""
    end = time.monotonic() + limit
    buf = []
    while time.monotonic() < end:
        line = p.stderr.readline()
        if not line:
            return False
        buf.append(line)
        if needle in line:
            return True
    return False


def _signal_after_join(sig: int, victim: int, needle: str = "nodes joined as"):
    def act(procs: dict) -> float:
        if wait_line(procs[victim], needle):
            os.killpg(procs[victim].pid, sig)
        return time.monotonic()

    return act


def p_healthy(ctx):
    return cluster(ctx)


def p_missing(ctx):
    return cluster(ctx, timeout=8, absent=(2,))


def p_killed(ctx):
    return cluster(ctx, after_join=_signal_after_join(signal.SIGKILL, 2))


def p_frozen(ctx):
    return cluster(ctx, after_join=_signal_after_join(signal.SIGSTOP, 2))


def p_frozen_collective(ctx):
    return cluster(ctx, after_join=_signal_after_join(signal.SIGSTOP, 2, "running the collective"))


def p_master_killed(ctx):
    return cluster(ctx, after_join=_signal_after_join(signal.SIGKILL, 0), report_rank=1)


def p_clock(ctx):
    return cluster(ctx, per_node=lambda r: {"prefix": ("faketime", "-f", "+5s")} if r == 2 else {})


def p_env_drift(ctx):
    return cluster(ctx, per_node=lambda r: {"env": {"NCCL_IB_DISABLE": "1"}} if r == 2 else {})


def p_package_drift(ctx):
    site = ctx.tmp / "extra-site"
    dist = site / "fakepkg_ddpd-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg-ddpd\nVersion: 1.0\n")
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return cluster(ctx, per_node=lambda r: {"env": {"PYTHONPATH": pythonpath}} if r == 2 else {})


def p_code_drift(ctx):
    dirs = []
    for r in range(3):
        d = ctx.tmp / f"code{r}"
        d.mkdir()
        (d / "train.py").write_text("print('train')\n" + ("# edited on one node\n" if r == 2 else ""))
        dirs.append(d)
    return cluster(ctx, per_node=lambda r: {"extra": ["--code", str(dirs[r])]})


def p_heterogeneous(ctx):
    # the PyTorch multinode tutorial's shape: nodes that start different process counts (legal, no finding)
    return cluster(ctx, per_node=lambda r: {"extra": ["--nproc-per-node", "2" if r == 2 else "4"]})


def p_launch_args(ctx):
    # a differing --nproc-per-node is legal (heterogeneous nodes, issue 20); a differing rendezvous id hangs
    return cluster(ctx, per_node=lambda r: {"extra": ["--rdzv-id", "job-b" if r == 2 else "job-a"]})


def p_duplicate_rank(ctx):
    port = free_port()
    t0 = time.monotonic()
    procs = [start(ctx, node_argv(0, 2, port, 15)),
             start(ctx, node_argv(1, 2, port, 15)),
             start(ctx, node_argv(1, 2, port, 15)[:-2] + ["--local-addr", "127.0.0.3"])]
    code, doc, err = finish(procs[0], SCENARIO_LIMIT_S)
    for p in procs[1:]:
        finish(p, 60)
    return Outcome(preflight_findings(doc, err, code), time.monotonic() - t0, code)


def p_shared_dir(ctx):
    shared, local = ctx.tmp / "shared", ctx.tmp / "node-local"
    shared.mkdir()
    local.mkdir()
    return cluster(ctx, per_node=lambda r: {"extra": ["--shared-dir", str(local if r == 2 else shared)]})


def p_token(ctx):
    return cluster(ctx, per_node=lambda r: {"env": {"DDPDOCTOR_TOKEN": "other" if r == 2 else "s3cret"}})


def p_wrong_ifname(ctx):
    return cluster(ctx, per_node=lambda r: {"env": {"NCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "eth9"}}
                   if r == 2 else {})


def p_localhost(ctx):
    t0 = time.monotonic()
    p = start(ctx, [sys.executable, "-m", "ddpdoctor", "preflight", "--master", f"localhost:{free_port()}",
                    "--nnodes", "2", "--timeout", "15"])
    code, doc, err = finish(p, 60)
    return Outcome(preflight_findings(doc, err, code), time.monotonic() - t0, code)


def p_master_absent(ctx):
    return cluster(ctx, timeout=6, absent=(0,), report_rank=1)


def p_hostile_verdict(ctx):
    """A stranger on the rendezvous port appends a forged verdict (PASS, escape sequences) before the real one."""
    import datetime

    import torch.distributed as dist

    port = free_port()
    t0 = time.monotonic()
    procs = [start(ctx, node_argv(r, 3, port, 15), {"DDPDOCTOR_TOKEN": "s3cret"}) for r in range(3)]
    wait_line(procs[0], "hosting the rendezvous store")
    store = dist.PrefixStore("ddpdoctor", dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10)))
    forged = {"v": 1, "run": "0" * 32, "key": "verdict", "from": [0, 1], "sig": "",
              "body": json.dumps({"verdict": "fail", "exit_code": 1, "results": [], "nodes": {},
                                  "advice": ["\x1b[2Jrm -rf ~"]})}
    store.append("verdict", b"\n" + json.dumps(forged).encode() + b"\n")
    code, doc, err = finish(procs[1], SCENARIO_LIMIT_S)
    for p in (procs[0], procs[2]):
        finish(p, 60)
    return Outcome(preflight_findings(doc, err, code), time.monotonic() - t0, code,
                   note="worker's view; the forged verdict said FAIL")


# ----------------------------------------------------------------------------------------------------
# Preflight in network namespaces (the tests' fabric: a bridge in its own namespace).


def netns(ctx: Ctx, setup: Callable[[object], None], env: dict | None = None, timeout: float = 20,
          report: int = 0) -> Outcome:
    from tests.integration.test_netns_faults import Fabric

    fab = Fabric(3).up()
    ctx.cleanups.append(fab.down)
    setup(fab)
    port = 29400 + uuid.uuid4().int % 500
    t0 = time.monotonic()
    procs = [fab.start(i, port, timeout, env={"GLOO_SOCKET_IFNAME": "eth0"} if env is None else env) for i in range(3)]
    code, doc, err = finish(procs[report], SCENARIO_LIMIT_S)
    for i, p in enumerate(procs):
        if i != report:
            finish(p, 60)
    return Outcome(preflight_findings(doc, err, code), time.monotonic() - t0, code)


def n_drop(ctx):
    return netns(ctx, lambda f: f.in_node(2, "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-s", f.addr(1), "-j", "DROP"))


def n_reject(ctx):
    return netns(ctx, lambda f: f.in_node(2, "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-s", f.addr(1),
                                          "-j", "REJECT", "--reject-with", "tcp-reset"))


def n_cut(ctx):
    return netns(ctx, lambda f: f.in_node(2, "ip", "link", "set", "eth0", "down"), timeout=8)


def n_loopback_hostname(ctx):
    return netns(ctx, lambda f: None, env={})


def n_mtu(ctx):
    return netns(ctx, lambda f: f.in_node(2, "ip", "link", "set", "eth0", "mtu", "1400"))


def n_slow_link(ctx):
    return netns(ctx, lambda f: f.in_node(2, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "150ms"))


# ----------------------------------------------------------------------------------------------------
# nccl-bench (gloo): the tool's own fault hooks stand in for a slow, dead or hung GPU rank.


def bench(ctx: Ctx, env: dict, *args: str) -> tuple[Outcome, dict | None]:
    t0 = time.monotonic()
    p = start(ctx, [sys.executable, "-m", "ddpdoctor", "nccl-bench", "--backend", "gloo", "--json", *args], env)
    code, doc, err = finish(p, SCENARIO_LIMIT_S)
    findings = []
    line = next((ln for ln in reversed(err.splitlines()) if ln.startswith("Error:")), "")
    if line:
        findings.append(Finding("fail", {f"rank {r}" for r in RANK.findall(line)[:1]}, line, line))
    if doc and doc.get("localisation"):
        for s in doc["localisation"].get("suspects", []):
            findings.append(Finding("fail", {s["node"]}, f"slow node {s['node']}: {s}", "localisation"))
    return Outcome(findings, time.monotonic() - t0, code), doc


def b_slow_node(ctx):
    out, _ = bench(ctx, {"DDPDOCTOR_BENCH_TEST_RANKS_PER_NODE": "1", "DDPDOCTOR_BENCH_TEST_SLOW_RANK": "3"},
                   "--nproc-per-node", "6", "-b", "64K", "-e", "64K", "-n", "3", "-w", "1", "--localise",
                   "--localise-size", "64K", "--no-check")
    return out


def b_killed(ctx):
    out, _ = bench(ctx, {"DDPDOCTOR_BENCH_TEST_DIE_RANK": "2", "DDPDOCTOR_BENCH_TEST_DIE_AT_BYTES": "65536"},
                   "--nproc-per-node", "3", "-b", "8K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1", "--timeout", "20")
    return out


def b_hung(ctx):
    out, _ = bench(ctx, {"DDPDOCTOR_BENCH_TEST_HANG_RANK": "1", "DDPDOCTOR_BENCH_TEST_DIE_AT_BYTES": "65536"},
                   "--nproc-per-node", "3", "-b", "8K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1", "--timeout", "8")
    return out


def b_corrupt(ctx):
    out, _ = bench(ctx, {"DDPDOCTOR_BENCH_TEST_CORRUPT_RANK": "1"}, "--nproc-per-node", "2", "-b", "64K", "-e", "64K",
                   "-n", "2", "-w", "1")
    if out.exit_code == 1 and not out.findings:
        out.findings.append(Finding("fail", set(), "wrong elements counted (#wrong)", "nccl-bench --check"))
    return out


# ----------------------------------------------------------------------------------------------------
# run-trainer with a plain user DDP script (the forensics tests' script: one file, every fault).


def trainer(ctx: Ctx, mode: str, *flags: str, env: dict | None = None) -> Outcome:
    from tests.integration.test_forensics import USER_DDP

    script = ctx.tmp / "user_ddp.py"
    script.write_text(USER_DDP)
    t0 = time.monotonic()
    p = start(ctx, [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", "2",
                    "--run-dir", str(ctx.tmp / "run"), "--json", *flags, "--", str(script), mode], env)
    code, doc, err = finish(p, SCENARIO_LIMIT_S)
    return Outcome(trainer_findings(doc), time.monotonic() - t0, code)


def t_exception(ctx):
    return trainer(ctx, "raise")


def t_sigkill(ctx):
    return trainer(ctx, "kill")


def t_stuck(ctx):
    return trainer(ctx, "sleep", "--hang-timeout", "5")


def t_loader(ctx):
    return trainer(ctx, "loader", "--hang-timeout", "5")


def t_desync(ctx):
    return trainer(ctx, "barrier", "--hang-timeout", "5")


SHAPES = textwrap.dedent("""\
    import time
    import torch, torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(100000):
        n = 8 if (rank == 1 and step == 4) else 16  # one rank all-reduces another shape
        t = torch.ones(n)
        dist.all_reduce(t)
        time.sleep(0.2)
""")


def t_shapes(ctx):
    script = ctx.tmp / "shapes.py"
    script.write_text(SHAPES)
    t0 = time.monotonic()
    p = start(ctx, [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", "2",
                    "--hang-timeout", "5", "--run-dir", str(ctx.tmp / "run"), "--json", "--", str(script)])
    code, doc, err = finish(p, SCENARIO_LIMIT_S)
    return Outcome(trainer_findings(doc), time.monotonic() - t0, code)


def t_healthy_slow_start(ctx):
    return trainer(ctx, "slowstart", env={"STEPS": "40", "STEP_S": "0.05"})


def t_reference_healthy(ctx):
    t0 = time.monotonic()
    p = start(ctx, [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", "2",
                    "--run-dir", str(ctx.tmp / "run"), "--json", "--", "--steps", "20", "--n-layer", "1",
                    "--n-embd", "32", "--batch-size", "4", "--block-size", "32"])
    code, doc, err = finish(p, SCENARIO_LIMIT_S)
    return Outcome(trainer_findings(doc), time.monotonic() - t0, code)


# ----------------------------------------------------------------------------------------------------
# Issue 30's job shapes (tests/integration/shape_jobs/: pipelines, MoE all_to_all, TP x DP, FSDP-like, two
# process groups, a rank that never starts, is SIGKILLed or leaves early, each family's healthy job), each under
# run-trainer and under plain torchrun read by `ddpdoctor postmortem LOGDIR --agent-log TORCHRUN_STDERR`. The
# runs are the tests' (tests/integration/test_forensics_shapes*.py): same scripts, same flags. The ranks blamed
# are `culprit_ranks` with the live verdict's culprits, so an innocent rank named beside the culprit is a miss.
# Time to verdict: from the fault (the script's STALL_FILE mark) to the tool's answer; for postmortem, torchrun's
# end after the fault plus postmortem's own time.

SHAPE_WORDS = {"stuck": r"missing_rank|hang|stuck|timed out|never", "hang": r"missing_rank|hang|stuck|timed out|never",
               "shape": r"desync|mismatch|shape|size", "splits": r"desync|mismatch|split|size",
               "skip": r"desync|missing_rank|hang|all_gather|reduce_scatter|mismatch",
               "guarded": r"desync|missing_rank|hang|guard|never", "noinit": r"init|missing|never|hang|store",
               "kill": r"SIGKILL|signal 9|killed", "early": r"early|exit|ended"}


def shape_findings(doc: dict | None) -> list[Finding]:
    from tests.integration.shape_jobs import culprits_named

    if not doc or not doc.get("root_cause"):
        return []
    rc = doc["root_cause"]
    if rc.get("category") == "unverified":  # no failure recorded and no normal end shown (issue 45): blames none
        return []
    verdict = (doc.get("hang") or {}).get("verdict") or {}
    text = " ".join(str(x) for x in (rc.get("category"), rc.get("error_type"), verdict.get("class"), rc.get("signal"),
                                     rc.get("message"), rc.get("reason"), rc.get("location")) if x)
    return [Finding("root", {f"rank {r}" for r in culprits_named(doc)}, text, rc.get("fix") or "")]


def shape_trainer(name: str) -> Callable[[Ctx], Outcome]:
    def run(ctx: Ctx) -> Outcome:
        from tests.integration.shape_jobs import SHAPES, run_trainer

        r = run_trainer(SHAPES[name], ctx.tmp, limit=SCENARIO_LIMIT_S)
        note = "" if r.code is not None else "killed at the limit"
        if r.code is not None and r.code > 1:  # a usage or internal error: its own line says which
            note = next((ln for ln in reversed(r.stderr.splitlines()) if ln.startswith("Error:")), "")[:300]
        return Outcome(shape_findings(r.doc), r.seconds, r.code, note)

    return run


def shape_postmortem(name: str) -> Callable[[Ctx], Outcome]:
    def run(ctx: Ctx) -> Outcome:
        from tests.integration.shape_jobs import SHAPES, postmortem, run_torchrun

        r, logs, agent = run_torchrun(SHAPES[name], ctx.tmp, limit=SCENARIO_LIMIT_S)
        t0 = time.monotonic()
        code, doc, _ = postmortem(logs, "--agent-log", str(agent))
        note = f"torchrun exit {r.code}" + ("" if r.code is not None else " (killed at the limit)")
        if code == 5:
            note += "; not verified (no normal end in the records: exit 5)"
        return Outcome(shape_findings(doc), r.seconds + time.monotonic() - t0, code, note)

    return run


def shape_scenarios() -> list[Scenario]:
    from tests.integration.shape_jobs import SHAPES

    out = []
    for name, shape in SHAPES.items():
        ids = {f"rank {r}" for r in shape.culprits} if shape.culprits else None
        words = SHAPE_WORDS.get(shape.mode, "")
        fault = shape.what if shape.culprits else "none"
        out.append(Scenario(name, "run-trainer", fault, ids, words, shape_trainer(name), group="shapes"))
        out.append(Scenario(f"{name}/postmortem", "postmortem", fault, ids, words, shape_postmortem(name),
                            group="shapes"))
    return out


# ----------------------------------------------------------------------------------------------------
# Issue 37's library jobs (tests/integration/library_jobs/: DDP, FSDP2, pipelining schedules, hand-written
# batch_isend_irecv, TP x DP on a 2-D mesh, Lightning, Accelerate, torch.compile'd DDP), each with a hang, an
# exception, a kill -9 from outside or a straggler on rank 1, or none; under run-trainer (--hang-timeout 8 where it
# hangs), and under plain torchrun read by postmortem with torchrun's output (--agent-log) and from the log dir
# alone (the same run). A straggler is a hit when run-trainer names rank 1 a straggler and the job passes (a
# postmortem has nothing to say: pass). run-trainer's time to verdict is from the fault to its exit; its live
# verdict's (the hang line, the straggler line) is in the note.

LIBRARY_WORDS = {"hang": r"hang|missing|never|stopped|wait", "raise": r"RuntimeError|exception|bad batch",
                 "kill": r"SIGKILL|signal 9|killed|likely", "straggler": r"straggler|slower"}
_LIB_RUNS: dict[str, tuple] = {}
_LIB_TMP: list[Path] = []


def _lib_tmp() -> Path:
    if not _LIB_TMP:
        import atexit

        _LIB_TMP.append(Path(tempfile.mkdtemp(prefix="ddpd-diag-lib-")))
        atexit.register(shutil.rmtree, _LIB_TMP[0], True)
    return _LIB_TMP[0]


def library_trainer(lib: str, fault: str) -> Callable[[Ctx], Outcome]:
    def run(ctx: Ctx) -> Outcome:
        from tests.integration.library_jobs import job
        from tests.integration.shape_jobs import run_trainer

        r = run_trainer(job(lib, fault), ctx.tmp, limit=SCENARIO_LIMIT_S)
        doc = r.doc or {}
        findings = shape_findings(r.doc)
        live = []
        if (doc.get("hang") or {}).get("stalled_s") is not None:
            live.append(f"live verdict {doc['hang']['stalled_s']} s after the stall")
        for st in doc.get("stragglers") or []:
            findings.append(Finding("warn", {f"rank {st['rank']}"}, f"straggler slower {st.get('slower_x')}x",
                                    "look at its own code"))
            live.append(f"straggler named {st.get('named_after_s')} s into the run")
        if fault == "straggler" and r.code != 0:
            findings.append(Finding("fail", set(), f"exit {r.code}", ""))
        if fault in ("hang", "kill"):
            live.append(f"fr_trace on its dumps: {fr_trace_of(ctx.tmp / 'run')}")
        note = "; ".join(live) if r.code is not None else "killed at the limit"
        return Outcome(findings, r.seconds, r.code, note)

    return run


def fr_trace_of(run_dir: Path) -> str:
    """torch's own analyzer on the flight records run-trainer's ranks wrote (JSON, pickled for fr_trace, the
    default group's name repaired as bench_fr_compare does): the ranks it names, or why none."""
    import pickle

    from bench_fr_compare import fr_trace

    folder = run_dir / "fr_trace"
    folder.mkdir(exist_ok=True)
    for dump in sorted(run_dir.glob("*/flight_recorder/rank*.json")):
        try:
            data = json.loads(dump.read_text())
        except (OSError, ValueError):
            continue
        (folder / f"nccl_trace_rank_{dump.stem[4:]}").write_bytes(pickle.dumps(data))
    ranks, note = fr_trace(folder, repaired=True)
    return note if ranks is None else (",".join(map(str, ranks)) or "none")


def library_postmortem(lib: str, fault: str, alone: bool) -> Callable[[Ctx], Outcome]:
    def run(ctx: Ctx) -> Outcome:
        from tests.integration.library_jobs import job
        from tests.integration.shape_jobs import postmortem, run_torchrun

        key = f"{lib}-{fault}"
        if key not in _LIB_RUNS:
            _LIB_RUNS[key] = run_torchrun(job(lib, fault), _lib_tmp() / key, limit=SCENARIO_LIMIT_S)
        r, logs, agent = _LIB_RUNS[key]
        t0 = time.monotonic()
        code, doc, _ = postmortem(logs) if alone else postmortem(logs, "--agent-log", str(agent))
        note = f"torchrun exit {r.code}" + ("" if r.code is not None else " (killed at the limit)")
        if code == 5:
            note += "; not verified (no normal end in the records: exit 5)"
        return Outcome(shape_findings(doc), r.seconds + time.monotonic() - t0, code, note)

    return run


def library_scenarios() -> list[Scenario]:
    from tests.integration.library_jobs import FAULTS, LIBRARIES

    out = []
    for lib in LIBRARIES:
        for fault in FAULTS:
            named = fault not in ("healthy",)
            ids = {"rank 1"} if named else None
            words = LIBRARY_WORDS.get(fault, "")
            name = f"{lib}-{fault}"
            level = ("warn",) if fault == "straggler" else ("fail", "exit3", "root")
            out.append(Scenario(name, "run-trainer", fault, ids, words, library_trainer(lib, fault),
                                expect_level=level, group="libraries"))
            pm_ids = None if fault == "straggler" else ids
            out.append(Scenario(f"{name}/postmortem", "postmortem", fault, pm_ids, words,
                                library_postmortem(lib, fault, alone=False), group="libraries"))
            out.append(Scenario(f"{name}/logs-only", "postmortem", fault, pm_ids, words,
                                library_postmortem(lib, fault, alone=True), group="libraries"))
    return out


# ----------------------------------------------------------------------------------------------------
# GPU scenarios: registered here, run only where a GPU is present.


def g_bad_ordinal(ctx):
    script = ctx.tmp / "ordinal.py"
    script.write_text(textwrap.dedent("""\
        import os, torch, torch.distributed as dist
        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["RANK"]) + 7)  # cuda:{rank} on a node with fewer GPUs
    """))
    t0 = time.monotonic()
    p = start(ctx, [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", "1",
                    "--run-dir", str(ctx.tmp / "run"), "--json", "--", str(script)])
    code, doc, err = finish(p, SCENARIO_LIMIT_S)
    return Outcome(trainer_findings(doc), time.monotonic() - t0, code)


def g_throttled(ctx):
    raise NotImplementedError("needs a GPU whose clocks can be capped (nvidia-smi -lgc): not automated yet")


SCENARIOS = [
    Scenario("healthy-3-nodes", "preflight", "none", None, "", p_healthy),
    Scenario("healthy-heterogeneous", "preflight", "none", None, "", p_heterogeneous),
    Scenario("missing-node", "preflight", "missing node", {"rank 2"}, r"missing", p_missing),
    Scenario("killed-node", "preflight", "dead node", {"127.0.0.3"}, r"stopped answering|killed", p_killed),
    Scenario("frozen-node", "preflight", "frozen node", {"127.0.0.3"}, r"heartbeat|frozen|stopped", p_frozen),
    Scenario("frozen-in-collective", "preflight", "frozen node", {"127.0.0.3"}, r"heartbeat|stopped|collective",
             p_frozen_collective),
    Scenario("master-killed", "preflight", "dead master", {"127.0.0.1"}, r"master .* stopped answering",
             p_master_killed),
    Scenario("master-absent", "preflight", "nothing listening", {"127.0.0.1"}, r"refused", p_master_absent),
    Scenario("localhost-master", "preflight", "MASTER_ADDR=localhost", set(), r"loopback", p_localhost),
    Scenario("clock-skew", "preflight", "clock skew", {"127.0.0.3"}, r"clock|offset|ahead", p_clock, ("faketime",)),
    Scenario("env-drift", "preflight", "env drift", {"127.0.0.3"}, r"NCCL_IB_DISABLE", p_env_drift),
    Scenario("package-drift", "preflight", "package drift", {"127.0.0.3"}, r"fakepkg|package", p_package_drift),
    Scenario("code-drift", "preflight", "code drift", {"127.0.0.3"}, r"code", p_code_drift),
    Scenario("launch-arg-mismatch", "preflight", "launch-arg mismatch", {"127.0.0.3"}, r"rdzv", p_launch_args),
    Scenario("duplicate-rank", "preflight", "duplicate rank", {"127.0.0.2", "127.0.0.3"}, r"rank 1",
             p_duplicate_rank),
    Scenario("node-local-shared-dir", "preflight", "node-local shared dir", {"127.0.0.3"}, r"shared",
             p_shared_dir),
    Scenario("wrong-token", "preflight", "wrong token", {"127.0.0.3"}, r"token|rejected", p_token),
    Scenario("wrong-interface", "preflight", "wrong interface", {"127.0.0.3"}, r"eth9|IFNAME", p_wrong_ifname),
    Scenario("forged-verdict", "preflight", "hostile store client", set(), r"invalid message.*verdict",
             p_hostile_verdict, expect_level=("warn",)),
    Scenario("firewall-drop", "preflight", "firewall DROP", {"198.18.0.2", "198.18.0.3"}, r"timed out", n_drop,
             ("netns",)),
    Scenario("firewall-reject", "preflight", "firewall REJECT", {"198.18.0.2", "198.18.0.3"}, r"refused", n_reject,
             ("netns",)),
    Scenario("cut-link", "preflight", "cut link", {"rank 2"}, r"missing", n_cut, ("netns",)),
    Scenario("hostname-on-loopback", "preflight", "hostname on loopback", {"198.18.0.1", "198.18.0.2", "198.18.0.3"},
             r"loopback", n_loopback_hostname, ("netns",)),
    Scenario("mtu-mismatch", "preflight", "MTU mismatch", {"198.18.0.3"}, r"mtu", n_mtu, ("netns",),
             expect_level=("fail", "warn")),
    Scenario("slow-link", "preflight", "slow link", {"198.18.0.3"}, r"round trip|slow|ms", n_slow_link, ("netns", "netem"),
             expect_level=("fail", "warn")),
    Scenario("slow-node", "nccl-bench", "slow node", {"node3"}, r"slow", b_slow_node),
    Scenario("killed-rank", "nccl-bench", "SIGKILL", {"rank 2"}, r"SIGKILL|signal 9", b_killed),
    Scenario("hung-rank", "nccl-bench", "stuck rank", {"rank 1"}, r"stopped answering", b_hung),
    Scenario("corrupt-data", "nccl-bench", "wrong data", set(), r"wrong", b_corrupt),
    Scenario("exception", "run-trainer", "exception", {"rank 1"}, r"ValueError", t_exception),
    Scenario("sigkill-rank", "run-trainer", "SIGKILL/OOM", {"rank 1"}, r"SIGKILL", t_sigkill),
    Scenario("stuck-rank", "run-trainer", "stuck rank", {"rank 1"}, r"missing_rank|hang", t_stuck),
    Scenario("stuck-data-loader", "run-trainer", "stuck rank", {"rank 1"}, r"missing_rank|hang", t_loader),
    Scenario("rank0-only-barrier", "run-trainer", "desync", {"rank 0"}, r"desync", t_desync),
    Scenario("mismatched-shapes", "run-trainer", "mismatched shapes", {"rank 1"}, r"desync|shape", t_shapes),
    Scenario("healthy-slow-start", "run-trainer", "none", None, "", t_healthy_slow_start),
    Scenario("healthy-reference-trainer", "run-trainer", "none", None, "", t_reference_healthy),
    Scenario("invalid-device-ordinal", "run-trainer", "invalid device ordinal", {"rank 0"}, r"ordinal|device",
             g_bad_ordinal, ("gpu",)),
    Scenario("throttled-gpu", "preflight", "throttled GPU", set(), r"clock|throttl", g_throttled, ("gpu",)),
    *shape_scenarios(),
    *library_scenarios(),
]


def available(need: str) -> bool:
    if need == "netns":
        return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("iptables") is not None
    if need == "faketime":
        return shutil.which("faketime") is not None
    if need == "gpu":
        return shutil.which("nvidia-smi") is not None
    if need == "netem":
        return available("netns") and _netem_works()
    return True


def _netem_works() -> bool:
    """tc's netem (delay) is a kernel module some kernels lack; try it in a throwaway namespace."""
    ns = f"ddpd-netem-{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, timeout=10)
        res = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                              "1ms"], capture_output=True, timeout=10)
        return res.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def run_one(sc: Scenario) -> Row:
    missing = [n for n in sc.needs if not available(n)]
    if missing:
        return Row(sc.name, sc.tool, sc.fault, "-", f"not run: needs {', '.join(missing)}", False, False, 0.0, "skipped")
    ctx = Ctx()
    try:
        out = sc.run(ctx)
    except Exception as exc:  # noqa: BLE001 - a broken scenario is a miss, not the end of the benchmark
        out = Outcome([], 0.0, None, note=f"scenario error: {type(exc).__name__}: {exc}")
    finally:
        ctx.close()
    return score(sc, out)


def totals(rows: list[Row], by_tool: bool = True) -> dict:
    ran = [r for r in rows if r.note != "skipped"]
    times = sorted(r.seconds for r in ran)
    out = {"scenarios": len(rows), "ran": len(ran), "hits": sum(r.hit for r in ran),
           "misses": sum(not r.hit for r in ran), "false_alarms": sum(r.false_alarm for r in ran),
           "median_s": times[len(times) // 2] if times else None, "worst_s": times[-1] if times else None}
    if by_tool:
        out["by_tool"] = {tool: totals([r for r in rows if r.tool == tool], by_tool=False)
                          for tool in dict.fromkeys(r.tool for r in rows)}
    return out


def print_table(rows: list[Row]) -> None:
    print(f"{'scenario':26} {'tool':11} {'hit':4} {'s':>6}  got")
    for r in rows:
        mark = "-" if r.note == "skipped" else ("yes" if r.hit else "NO")
        print(f"{r.scenario:26} {r.tool:11} {mark:4} {r.seconds:6.1f}  {r.got[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="tools or scenario names, comma-separated")
    ap.add_argument("--json", dest="json_out", help="write rows and totals here")
    args = ap.parse_args()
    chosen = SCENARIOS
    if args.only:
        want = {w.strip() for w in args.only.split(",")}
        chosen = [s for s in SCENARIOS if s.name in want or s.tool in want or s.group in want]
    rows = []
    for sc in chosen:
        row = run_one(sc)
        rows.append(row)
        state = "not run" if row.note == "skipped" else ("hit" if row.hit else "MISS")
        print(f"[{len(rows)}/{len(chosen)}] {row.scenario}: {state} in {row.seconds} s"
              f" - {row.got[:120]}", flush=True)
    print()
    print_table(rows)
    t = totals(rows)
    print(f"\nhits {t['hits']}/{t['ran']} · misses {t['misses']} · false alarms {t['false_alarms']} · "
          f"time to verdict median {t['median_s']} s, worst {t['worst_s']} s")
    for tool, tt in t["by_tool"].items():
        print(f"  {tool}: hits {tt['hits']}/{tt['ran']} · false alarms {tt['false_alarms']} · "
              f"median {tt['median_s']} s, worst {tt['worst_s']} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": [asdict(r) for r in rows], "totals": t}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
