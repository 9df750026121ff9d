"""The multi-node preflight protocol: nodes meet on torch's TCPStore, exchange sealed JSON facts, test the
links between them, and share one verdict.

The steps, the same on every node (``Node.run``); the master (node rank 0, which hosts the store unless
torchrun's agent already does) and the workers differ only inside a step:
  connect  raw TCP to the master first, failures classified (endpoint.py); the master posts the run nonce;
  meet     claim a rank, post a signed identity; the master names the missing ranks at the meet deadline
           and posts the roster (roster.py);
  gather   cluster-phase checks with the roster (mesh, clock, names, shared dir...), facts posted;
  links    the master collects the facts (a node found dead or silent is named, not waited for again),
           re-checks liveness and says whether the collective may run;
  collect  every node runs the collective through the same store, results posted;
  verdict  the master compares everything (verdict.py) and posts the verdict; every node prints it.
All store traffic goes through the mailbox (mailbox.py); every wait takes its limit from one budget
(budget.py): a node ends within 2 x --timeout + 15 s, whatever its peers do.
"""
from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import __version__, runner
from ..errors import ClusterNotAssembled, UsageError
from ..inputs import MAX_NODES
from . import endpoint as ep
from . import launcher_env
from . import roster as rosters
from . import verdict as verdicts
from .budget import GRACE_S, SILENT_S, Budget
from .mailbox import MAX_CLAIMS, PREFIX, Mailbox, Slot, StoreGone, StoreSilent, bounded, key_of
from .probe import ProbeServer
from .view import ClusterView

POLL_S = 0.2
TOKEN_PATIENCE_S = 3.0  # how long a node waits for a valid hello beside one signed with another token


@dataclass
class JoinConfig:
    master: ep.Endpoint
    nnodes: int
    node_rank: int | None
    local_addr: str | None
    timeout: float
    token: str | None = None
    nproc_per_node: int | None = None
    rdzv_id: str | None = None
    code_dir: str | None = None
    shared_dir: str | None = None
    external_store: bool = False  # torchrun's agent hosts the store: every node is a client
    launcher: str | None = None
    quiet: bool = False
    hosts: list[str] | None = None  # the job's hosts, from the launcher or --hosts: names the missing ones

    @property
    def allow_loopback(self) -> bool:
        """Loopback is fine for a simulated node on loopback, or when torchrun's agents already met there."""
        return bool(self.local_addr and ep.is_loopback(self.local_addr)) or self.external_store


# ----------------------------------------------------------------------------------------------------
# Parsing: flags and the launcher's environment become a JoinConfig.


def config_from_flags(*, master, nnodes, node_rank, local_addr, timeout, token, nproc_per_node, rdzv_id,
                      code_dir, shared_dir, quiet, env=None, hosts=None) -> JoinConfig | None:
    """Returns None when this process should not run a node preflight (a second process on this node under
    torchrun, mpiexec or srun: local rank 0 speaks for the node)."""
    env = os.environ if env is None else env
    if hosts:
        info = launcher_env.from_hosts(hosts, socket.gethostname(), master)
    else:
        info = launcher_env.from_env(env, read_file=lambda p: Path(p).read_text(), hostname=socket.gethostname())
    if info.local_rank not in (None, 0):
        return None  # one preflight per node
    master_text = master or info.master
    if not master_text:
        raise UsageError("no master endpoint: pass --master HOST:PORT (or set MASTER_ADDR and MASTER_PORT)")
    endpoint = ep.parse_endpoint(master_text, default_port=29500)
    nnodes = nnodes or info.nnodes
    if not nnodes:
        raise UsageError("number of nodes unknown: pass --nnodes N")
    if not 1 <= nnodes <= MAX_NODES:
        raise UsageError(f"--nnodes {nnodes}: expected 1..{MAX_NODES}")
    if node_rank is None:
        node_rank = info.node_rank
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank {node_rank} is not in 0..{nnodes - 1} (--nnodes {nnodes})")
    if shared_dir is not None and not Path(shared_dir).is_dir():
        raise UsageError(f"--shared-dir {shared_dir}: not a directory on this node")
    if code_dir is not None and not Path(code_dir).is_dir():
        raise UsageError(f"--code {code_dir}: not a directory")
    if local_addr is not None and not _address_like(local_addr):
        raise UsageError(f"--local-addr {local_addr!r}: expected an IP address or a host name of this node")
    return JoinConfig(
        master=endpoint, nnodes=nnodes, node_rank=node_rank, local_addr=local_addr, timeout=timeout,
        token=token or None, nproc_per_node=nproc_per_node or info.nproc_per_node, rdzv_id=rdzv_id,
        code_dir=code_dir, shared_dir=shared_dir, external_store=info.source == "torchrun",
        launcher=info.source, quiet=quiet, hosts=info.hosts,
    )


def _address_like(text: str) -> bool:
    import ipaddress
    import re

    try:
        ipaddress.ip_address(text.split("%")[0])
        return True
    except ValueError:
        return bool(re.fullmatch(r"[A-Za-z0-9_.-]{1,253}", text))


def run_from_cli(plan, *, master, nnodes, node_rank, local_addr, timeout, token, nproc_per_node, rdzv_id,
                 code_dir, shared_dir, local_nodes, quiet, worker_argv: Callable[[int, int, str], list[str]] | None = None,
                 hosts=None):
    if local_nodes:
        from .local import run_local_cluster

        return run_local_cluster(local_nodes, timeout=timeout, worker_argv=worker_argv, quiet=quiet)
    cfg = config_from_flags(master=master, nnodes=nnodes, node_rank=node_rank, local_addr=local_addr,
                            timeout=timeout, token=token, nproc_per_node=nproc_per_node, rdzv_id=rdzv_id,
                            code_dir=code_dir, shared_dir=shared_dir, quiet=quiet, hosts=hosts)
    if cfg is None:
        return None
    return run_node(cfg, plan)


def run_node(cfg: JoinConfig, plan) -> dict:
    """One node's whole preflight. torch is imported here, on the calling thread, before any gather thread
    starts: two threads importing torch at once abort the process (`terminate called ... python_error`)."""
    budget = Budget(cfg.timeout)
    master_addrs = _resolve_master(cfg)
    is_master = _am_master(cfg, master_addrs)
    if cfg.nnodes > 1 and ep.is_loopback(master_addrs[0]) and not cfg.allow_loopback:
        raise ClusterNotAssembled(f"master {cfg.master} resolves to {master_addrs[0]} (loopback) but {cfg.nnodes} "
                                  f"nodes are expected; fix: {ep.FIXES[ep.LOOPBACK]}")
    # c10d reads its log level when torch loads: set here, before the import, or its socket warnings
    # ("waitForInput ... timed out") reach the terminal whatever Node.run sets later
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    try:
        import torch.distributed  # noqa: F401 - see the docstring
    except Exception as exc:  # noqa: BLE001 - a broken torch: ImportError, a missing shared library, ...
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        seen = "the other nodes report the master unreachable" if is_master else "the master reports it missing"
        raise ClusterNotAssembled(f"this node cannot join: torch does not import here ({reason}); the nodes meet "
                                  f"on torch's TCPStore, so {seen}. Fix: `{sys.executable} -m pip install torch` in "
                                  "the environment the job runs in (`ddpdoctor preflight` alone lists this node's "
                                  "other findings)") from exc

    role = Master if is_master else Worker
    return role(cfg, plan, budget).run()


def _resolve_master(cfg: JoinConfig) -> list[str]:
    res = ep.lookup("forward", cfg.master.host, cap_s=min(ep.LOOKUP_CAP_S, cfg.timeout))
    if not res["answer"]:
        raise ClusterNotAssembled(f"master {cfg.master}: {cfg.master.host!r} does not resolve "
                                  f"({res['error']}); fix: {ep.FIXES[ep.DNS]}")
    # IPv4 first, as torch's store connects
    return sorted(res["answer"], key=lambda a: ":" in a)


def _am_master(cfg: JoinConfig, master_addrs: list[str]) -> bool:
    if cfg.node_rank is not None:
        return cfg.node_rank == 0
    if cfg.external_store:
        return False
    if cfg.local_addr:
        return cfg.local_addr in master_addrs
    import psutil

    mine = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return any(a in mine for a in master_addrs) and not any(ep.is_loopback(a) for a in master_addrs)


# ----------------------------------------------------------------------------------------------------
# Running one node.


class Progress:
    """Short status lines on stderr, so a node waiting for its peers says what it waits for."""

    def __init__(self, quiet: bool, label: str):
        self.quiet = quiet
        self.label = label
        self._last = ""

    def say(self, text: str, *, dedupe: bool = False) -> None:
        if self.quiet or (dedupe and text == self._last):
            return
        self._last = text
        from ..report.console import safe_text

        print(f"[ddpdoctor {self.label}] {safe_text(text)}", file=sys.stderr, flush=True)


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64]
    except OSError:
        return None


class Heartbeats:
    """Which nodes' heartbeat counters have stopped moving: a frozen process (SIGSTOP, D state) cannot add."""

    def __init__(self, nodes: list[dict]):
        self.slots = {n["name"]: Slot(n["rank"], n["claim"]) for n in nodes}
        self.seen: dict[str, tuple[int, float]] = {}  # name -> (last value, when it last moved)

    def stalled(self, mb: Mailbox, names: list[str]) -> dict[str, float]:
        """Read the counters of ``names`` once; those unchanged for SILENT_S, with the seconds of silence."""
        beats = mb.beats([self.slots[nm] for nm in names])
        now = time.monotonic()
        out = {}
        for nm in names:
            value = beats.get(self.slots[nm], 0)
            last, since = self.seen.get(nm, (-1, now))
            if value != last:
                self.seen[nm] = (value, now)
            elif now - since >= SILENT_S:
                out[nm] = now - since
        return out


class Node:
    """The steps every node takes; Master and Worker fill in the ones where their roles differ."""

    def __init__(self, cfg: JoinConfig, plan, budget: Budget):
        self.cfg = cfg
        self.plan = plan
        self.budget = budget
        self.rank = cfg.node_rank
        self.progress = Progress(cfg.quiet, f"rank {cfg.node_rank if cfg.node_rank is not None else '?'}")
        self.mb: Mailbox | None = None
        self.probe: ProbeServer | None = None
        self.timings: dict[str, float] = {}
        self.fresh = secrets.token_hex(16)  # this node's own freshness: the roster must echo it
        self._stores: list = []  # keeps torch's store objects alive for the run
        self._beating = threading.Event()

    # -- the protocol, top to bottom --------------------------------------------------------------------
    def run(self) -> dict:
        local: dict = {}
        local_thread = threading.Thread(target=self._gather_local, args=(local,), name="gather-local", daemon=True)
        local_thread.start()
        try:
            self.connect()
            self.open_probe()
            self.claim()
            roster = self.meet()
            view = self.view(roster)
            local_thread.join(self.budget.left(self.budget.verdict_by - 2 * GRACE_S))
            self.gather_cluster(view, local)
            go = self.links(view)
            self.collective(view, go)
            return self.verdict(view)
        except (StoreGone, StoreSilent) as exc:
            raise ClusterNotAssembled(f"the master {self.cfg.master} stopped answering ({exc}); "
                                      f"{self._master_hint()}{self._refused_note()}") from None
        finally:
            self.close()

    def _refused_note(self) -> str:
        """What this node refused before the master went quiet: a replayed or forged message in its way
        explains more than the silence (the master may have given up on this node because of it)."""
        findings = self.mb.findings if self.mb is not None else []
        if not findings:
            return ""
        last = findings[-1]
        return f"; before that this node ignored {len(findings)} invalid message(s), the last at {last.key}: {last.why}"

    def connect(self) -> None:
        raise NotImplementedError

    def meet(self) -> dict:
        raise NotImplementedError

    def links(self, view: ClusterView) -> dict:
        raise NotImplementedError

    def verdict(self, view: ClusterView) -> dict:
        raise NotImplementedError

    # -- steps shared by both roles ---------------------------------------------------------------------
    def _gather_local(self, box: dict) -> None:
        from ..preflight import gather_phase

        box["facts"], box["gather"] = gather_phase(self.plan, "local", socket.gethostname(),
                                                   rank=self.rank or 0, nnodes=self.cfg.nnodes)

    def _client(self, limit_s: float):
        """A store client, its construction bounded (an endpoint that accepts TCP but never answers)."""
        import datetime

        import torch.distributed as dist

        cfg = self.cfg
        timeout = datetime.timedelta(seconds=max(1.0, limit_s))
        try:
            raw = bounded(lambda: dist.TCPStore(cfg.master.host, cfg.master.port, None, False, timeout),
                          limit_s + 2, "connecting to the store")
        except (StoreGone, StoreSilent) as exc:
            raise ClusterNotAssembled(f"the master {cfg.master} accepted TCP but its store did not answer: {exc}; "
                                      f"is something else listening on port {cfg.master.port}?") from None
        self._stores.append(raw)
        run_id = cfg.rdzv_id or os.environ.get("TORCHELASTIC_RUN_ID", "run")
        prefix = PREFIX if not cfg.external_store else f"{PREFIX}/{run_id}"
        store = dist.PrefixStore(prefix, raw)

        def pg_connection():
            """The collective's own client: a TCPStore client serialises its calls, so a process group
            blocked in its rendezvous (a peer frozen or killed mid-collective) would hold up this node's
            heartbeat and the master's liveness reads on a shared one."""
            own = dist.TCPStore(cfg.master.host, cfg.master.port, None, False,
                                datetime.timedelta(seconds=max(1.0, self.budget.left())))
            self._stores.append(own)
            return dist.PrefixStore(prefix, own)

        self.mb = Mailbox(store, token=cfg.token, nnodes=cfg.nnodes, max_nodes=MAX_NODES, pg_connect=pg_connection)

    def open_probe(self) -> None:
        addr = self.cfg.local_addr or ep.source_addr_towards(self.cfg.master.host) or "0.0.0.0"
        try:
            self.probe = ProbeServer(addr)
        except OSError as exc:
            raise UsageError(f"--local-addr {addr}: cannot listen there ({exc.strerror or exc}); "
                             f"is it an address of this machine?") from exc

    def claim(self) -> None:
        """Take a node rank (given, or by arrival) and a claim number for it; start the heartbeat."""
        if self.rank is None:
            self.rank = self.mb.count("assign")  # ranks 1..N-1 by arrival; the master is 0
            if self.rank >= self.cfg.nnodes:
                raise ClusterNotAssembled(f"more nodes arrived than --nnodes {self.cfg.nnodes}: this node was "
                                          f"number {self.rank + 1}; fix: give every node the same --nnodes")
        self.progress.label = f"rank {self.rank}"
        self.mb.me = Slot(self.rank, self.mb.count("claim", rank=self.rank))
        self._beating.set()
        threading.Thread(target=self._heartbeat, name="ddpdoctor-heartbeat", daemon=True).start()
        self.mb.post("ident", self._identity())

    def _heartbeat(self) -> None:
        """A counter that moves while this process runs: a frozen node (SIGSTOP, D state) stops it."""
        me = self.mb.me
        for _ in range(int(self.budget.total_s) + 60):  # bounded: the run ends before this does
            if not self._beating.is_set():
                return
            try:
                self.mb.count("beat", slot=me)
            except (StoreGone, StoreSilent):
                pass  # the main thread hears of a dead master from its own calls
            time.sleep(1.0)

    def _identity(self) -> dict:
        cfg = self.cfg
        return {
            "rank": self.rank, "claim": self.mb.me.claim, "host": socket.gethostname()[:253],
            "fqdn": socket.getfqdn()[:253], "addr": self.probe.addr, "probe_port": self.probe.port,
            "pid": os.getpid(), "boot_id": _boot_id(), "tool_version": __version__, "launcher": cfg.launcher,
            "fresh": self.fresh,
            "launch": {"nnodes": cfg.nnodes, "nproc_per_node": cfg.nproc_per_node, "rdzv_id": cfg.rdzv_id,
                       "endpoint": str(cfg.master)},
            "checks": sorted(lc.name for lc in self.plan.checks),
        }

    def view(self, roster: dict) -> ClusterView:
        nodes = roster["nodes"]
        self.me = next(n for n in nodes if n["rank"] == self.mb.me.rank and n["claim"] == self.mb.me.claim)
        master = next(n for n in nodes if n["name"] == roster["master"])
        self.timings["joined_s"] = round(self.budget.elapsed(), 3)
        return ClusterView(
            me=self.me, nodes=nodes, master=master, endpoint=str(self.cfg.master), timeout=self.cfg.timeout,
            shared_dir=self.cfg.shared_dir, code_dir=self.cfg.code_dir, pg_store=self.mb.pg_store,
            budget=self.budget, world_rank=[n["name"] for n in nodes].index(self.me["name"]),
        )

    def gather_cluster(self, view: ClusterView, local: dict) -> None:
        from ..preflight import gather_phase

        self.progress.say(f"all {len(view.nodes)} nodes joined as {self.me['name']}; testing links")
        self.share_dir(view)
        facts, gather = gather_phase(self.plan, "cluster", self.me["name"], rank=self.rank, nnodes=self.cfg.nnodes,
                                     cluster=view, deadline=self.budget.verdict_by - 2 * GRACE_S)
        if not local:
            local = {"facts": {}, "gather": {lc.name: {"status": runner.TIMEOUT,
                                                       "message": "local checks did not finish in time"}
                                             for lc in self.plan.phase("local")}}
        facts.update(local.get("facts", {}))
        gather.update(local.get("gather", {}))
        self.mb.post("facts", {"facts": facts, "gather": gather})
        self.timings["facts_published_s"] = round(self.budget.elapsed(), 3)

    def share_dir(self, view: ClusterView) -> None:
        raise NotImplementedError

    def collective(self, view: ClusterView, go: dict) -> None:
        from ..preflight import gather_phase

        checks = self.plan.phase("collective")
        if go["go"] and checks:
            self.progress.say("links passed; running the collective smoke test")
            box: dict = {}
            work = threading.Thread(target=lambda: box.update(result=gather_phase(
                self.plan, "collective", self.me["name"], rank=self.rank, nnodes=self.cfg.nnodes, cluster=view,
                deadline=self.budget.verdict_by)), name="collective", daemon=True)
            work.start()
            stalled = self._watch_peers(view, work)
            if "result" in box:
                facts, gather = box["result"]
            else:  # a peer froze inside the collective: its process group would wait out its whole timeout
                facts, gather = {}, {lc.name: {"status": runner.TIMEOUT, "message": f"collective abandoned: node "
                                               f"{stalled} stopped answering during it"} for lc in checks}
        else:
            reason = go.get("reason") or "no collective checks selected"
            facts, gather = {}, {lc.name: {"status": runner.SKIPPED, "message": f"collective test not run: {reason}"}
                                 for lc in checks}
        self.mb.post("cfacts", {"facts": facts, "gather": gather})

    def _watch_peers(self, view: ClusterView, work: threading.Thread) -> str | None:
        """Wait for the collective while watching every peer's heartbeat: a node that freezes inside it is
        named after SILENT_S instead of after the process group's timeout. Returns that node's name."""
        beats = Heartbeats(view.nodes)
        peers = [n["name"] for n in view.nodes if n["name"] != self.me["name"]]
        while work.is_alive() and time.monotonic() < self.budget.verdict_by:
            work.join(1.0)
            if not work.is_alive():
                break
            for nm, quiet in beats.stalled(self.mb, peers).items():
                self.note_silent(nm, f"stopped answering during the collective: no heartbeat for {quiet:.0f} s "
                                     f"(process frozen, stopped or stuck)")
                return nm
        return None

    def note_silent(self, name: str, why: str) -> None:
        """Only the master keeps a record of silent nodes (for its verdict)."""

    def run_settings(self) -> dict:
        run = {k: v for k, v in self.plan.run.items() if v is not None}
        run.update(nnodes=self.cfg.nnodes, master=str(self.cfg.master), nproc_per_node=self.cfg.nproc_per_node,
                   shared_dir=self.cfg.shared_dir, code_dir=self.cfg.code_dir, timeout=self.cfg.timeout,
                   budget_s=self.budget.total_s)
        return {k: v for k, v in run.items() if v is not None}

    def _master_hint(self) -> str:
        return (f"fix: look at node rank 0 ({self.cfg.master.host}): was its preflight killed, stopped (Ctrl-Z, "
                f"SIGSTOP) or starved? rerun it there first; every node exits 3")

    def close(self) -> None:
        self._beating.clear()
        if self.probe is not None:
            self.probe.close()


class Master(Node):
    """Node rank 0: hosts the store (unless torchrun's agent does), builds the roster, decides the verdict."""

    def __init__(self, *args):
        super().__init__(*args)
        self.rank = 0
        self.silent: dict[str, str] = {}
        self.rejected: dict[str, str] = {}
        self.heartbeats: Heartbeats | None = None

    def connect(self) -> None:
        import datetime

        import torch.distributed as dist

        cfg = self.cfg
        if not cfg.external_store:
            timeout = datetime.timedelta(seconds=self.budget.total_s)
            try:
                server = bounded(lambda: dist.TCPStore(cfg.master.host, cfg.master.port, None, True, timeout,
                                                       wait_for_workers=False), 10.0, "starting the store")
            except (StoreGone, StoreSilent) as exc:
                raise ClusterNotAssembled(f"cannot listen on {cfg.master} as the master: {exc} "
                                          f"(is another preflight or job using port {cfg.master.port}?)") from None
            self._stores.append(server)
            self.progress.say(f"hosting the rendezvous store on {cfg.master}")
        self._client(self.budget.left(self.budget.meet_by))
        self.mb.run = secrets.token_hex(16)  # this run's nonce: every sealed message covers it
        self.mb.me = Slot(0, 0)
        self.mb.post("hello", {"protocol": 1, "nonce": self.mb.run, "nnodes": cfg.nnodes})
        self.timings["connected_s"] = round(self.budget.elapsed(), 3)

    def meet(self) -> dict:
        n = self.cfg.nnodes
        valid: dict[int, list[dict]] = {}
        read: set[Slot] = set()
        while True:
            self._read_idents(valid, read)
            missing = [r for r in range(n) if r not in valid]
            if not missing or time.monotonic() >= self.budget.meet_by:
                break
            self.progress.say(f"{n - len(missing)}/{n} nodes joined; waiting for rank(s) "
                              f"{rosters.ranks_text(missing[:20])}" + (" ..." if len(missing) > 20 else ""), dedupe=True)
            time.sleep(POLL_S)
        self._read_idents(valid, read)  # late claims of ranks already present (duplicates) are named too
        self._valid, self._read = valid, read  # read again at the verdict: a claim after the roster is named
        idents = [i for r in sorted(valid) for i in valid[r]]
        rejected_ranks = set()
        for f in self.mb.findings:
            if f.key.startswith("ident/"):
                self.rejected[f.key] = f"{f.why} ({f.claimed or 'unknown'})"
                if verdicts.is_token_problem(f):
                    rejected_ranks.add(int(f.key.split("/")[1]))
        # A rank whose only identity was signed with another token is a node that came, with a wrong
        # --token: the run goes on without it and fails naming it. A rank nobody claimed is missing.
        missing = [r for r in range(n) if r not in valid and r not in rejected_ranks]
        if missing or 0 not in valid:
            msg = rosters.missing_message(present=sorted(valid), missing=missing, idents=idents,
                                          endpoint=str(self.cfg.master), nnodes=n, timeout=self.cfg.timeout,
                                          hosts=self.cfg.hosts, launcher=self.cfg.launcher)
            if self.rejected:
                msg += f"; rejected: {'; '.join(sorted(self.rejected.values())[:3])}"
            self.mb.post("roster", rosters.aborted(msg))
            self._linger(time.monotonic() + 2.0)
            raise ClusterNotAssembled(msg)
        roster = rosters.accepted(idents, self.rejected)
        self.mb.post("roster", roster)
        return roster

    def _read_idents(self, valid: dict[int, list[dict]], read: set[Slot]) -> None:
        """Every claim of every rank not yet read; an invalid identity becomes a finding, its slot is done."""
        claims = self.mb.counts({r: f"claim/{r}" for r in range(self.cfg.nnodes)})
        for r, c in claims.items():
            for claim in range(1, min(c, MAX_CLAIMS) + 1):
                slot = Slot(r, claim)
                if slot in read:
                    continue
                ident = self.mb.read("ident", slot)
                if ident is not None:  # an invalid one is re-read: the real node may append after a forgery
                    valid.setdefault(r, []).append(ident)
                    read.add(slot)

    def share_dir(self, view: ClusterView) -> None:
        if not self.cfg.shared_dir:
            return
        nonce = secrets.token_hex(16)
        path = Path(self.cfg.shared_dir) / f".ddpdoctor-shared-{nonce[:8]}"
        try:
            path.write_text(nonce)
        except OSError as exc:
            nonce = f"unwritable: {exc}"
        view.shared_nonce = nonce
        view.extra["shared_file"] = str(path)
        self.shared_file = path
        self.mb.post("shared", {"nonce": nonce, "file": path.name})

    def links(self, view: ClusterView) -> dict:
        self.facts = self._collect("facts", view, self.budget.verdict_by - 2 * GRACE_S)
        self._check_liveness(view)  # a node may die between posting its facts and the collective
        go, reason = self._collective_go()
        message = {"go": go, "reason": reason}
        self.mb.post("go", message)
        return message

    def _collective_go(self) -> tuple[bool, str]:
        if self.silent:
            return False, f"node(s) {', '.join(sorted(self.silent))} stopped answering"
        for nm, data in self.facts.items():
            for link in runner.exported(data, "links") or []:  # the links any check probed (mesh's, a plugin's)
                if isinstance(link, dict) and link.get("ok") is False:
                    return False, f"link {nm} -> {link.get('peer')} failed ({link.get('error_class')})"
        return True, ""

    def verdict(self, view: ClusterView) -> dict:
        cfacts = self._collect("cfacts", view, self.budget.verdict_by - 1.0)
        merged = verdicts.merge(view, self.facts, cfacts)
        self.timings["verdict_s"] = round(self.budget.elapsed(), 3)

        def advice(results):
            from .advice import advice_lines

            return advice_lines(merged, view, self.cfg, results)

        doc = verdicts.decide(self.plan, self.run_settings(), view, merged, self.silent, self.mb.findings,
                              self.timings, advice, extra=self._late_claims(view))
        doc.update(this_node=self.me["name"], role="master")
        self.mb.post("verdict", verdicts.published(doc))
        readers = [n for n in view.nodes if n["name"] not in self.silent and n["name"] != self.me["name"]]
        self._linger(min(time.monotonic() + 5.0, self.budget.end), readers=readers)
        self._remove_shared_file()
        return doc

    def _late_claims(self, view: ClusterView) -> list:
        """Identities for a rank that came after the roster was made: a second node with the same node rank
        (it was told it is not in the roster and exits 3); the verdict names both."""
        try:
            self._read_idents(self._valid, self._read)
        except (StoreGone, StoreSilent):
            return []
        in_roster = {(n["rank"], n["claim"]) for n in view.nodes}
        holder = {n["rank"]: n["name"] for n in view.nodes}
        late = [i for idents in self._valid.values() for i in idents if (i["rank"], i["claim"]) not in in_roster]
        return [verdicts.duplicate_rank_result(i, holder.get(i["rank"])) for i in late]

    def _collect(self, kind: str, view: ClusterView, until: float) -> dict[str, dict]:
        """Every live node's message of this kind; a node that dies or falls silent is named at once."""
        got: dict[str, dict] = {}
        waiting = {n["name"]: n for n in view.nodes if n["name"] not in self.silent}
        last_liveness = 0.0
        while waiting:
            for nm, node in list(waiting.items()):
                body = self.mb.read(kind, Slot(node["rank"], node["claim"]))
                if body is not None:
                    got[nm] = body
                    del waiting[nm]
            if not waiting:
                break
            if time.monotonic() >= until:
                for nm in waiting:
                    self.silent[nm] = f"sent no {kind} within {self.budget.elapsed():.0f} s of the start"
                break
            if time.monotonic() - last_liveness > 1.0:
                last_liveness = time.monotonic()
                self._check_liveness(view, only=set(waiting))
                for nm in [nm for nm in waiting if nm in self.silent]:
                    del waiting[nm]
                self.progress.say(f"waiting for {kind} from {', '.join(sorted(waiting)[:10]) or '-'}", dedupe=True)
            time.sleep(POLL_S)
        return got

    def note_silent(self, name: str, why: str) -> None:
        self.silent.setdefault(name, why)

    def _check_liveness(self, view: ClusterView, only: set[str] | None = None) -> None:
        """Dead: its probe listener refuses (the process is gone). Silent: its heartbeat stopped moving."""
        if self.heartbeats is None:
            self.heartbeats = Heartbeats(view.nodes)
        watched = [n for n in view.nodes if n["name"] != self.me["name"] and n["name"] not in self.silent
                   and (only is None or n["name"] in only)]
        stalled = self.heartbeats.stalled(self.mb, [n["name"] for n in watched])
        for n in watched:
            nm = n["name"]
            if nm in stalled:
                self.silent[nm] = (f"stopped answering mid-preflight: no heartbeat for {stalled[nm]:.0f} s "
                                   f"(process frozen, stopped or stuck)")
                continue
            res = ep.ping(n["addr"], n["probe_port"], 1.0)
            if not res.ok and res.error_class == ep.REFUSED:
                self.silent[nm] = "stopped answering mid-preflight (its probe listener is gone: process killed?)"

    def _linger(self, until: float, readers: list[dict] | None = None) -> None:
        """The master hosts the store: stay until each reader's sealed "done" says it has the last word
        (bounded; without readers, the whole time)."""
        pending = {key_of("done", Slot(n["rank"], n["claim"])): Slot(n["rank"], n["claim"]) for n in readers or []}
        while time.monotonic() < until:
            try:
                if readers is not None:
                    present = self.mb.present(list(pending))  # one call for all; read only what is there
                    for key in [k for k, there in present.items() if there]:
                        if self.mb.read("done", pending[key]) is not None:
                            del pending[key]
                    if not pending:
                        return
            except (StoreGone, StoreSilent):
                return
            time.sleep(POLL_S)

    def _remove_shared_file(self) -> None:
        path = getattr(self, "shared_file", None)
        if path is not None:
            try:
                path.unlink()
            except OSError:
                pass


class Worker(Node):
    """Any node but rank 0: reaches the master, joins, and takes the master's verdict once it verifies."""

    def connect(self) -> None:
        cfg = self.cfg

        def tick(attempt: int, result: ep.PingResult, left: float) -> None:
            if not result.ok and attempt % 4 == 1:
                self.progress.say(f"master {cfg.master}: {result.error_class}, retrying for {left:.0f} s more")

        outcome = ep.wait_for_endpoint(cfg.master, self.budget.meet_by, nnodes=cfg.nnodes,
                                       allow_loopback=cfg.allow_loopback, on_attempt=tick)
        if not outcome.ok:
            raise ClusterNotAssembled(
                f"cannot reach the master {cfg.master} ({outcome.addr or 'unresolved'}): {outcome.error_class} "
                f"after {outcome.seconds:.1f} s, {outcome.attempts} attempt(s); fix: {outcome.fix}")
        self.progress.say(f"master {cfg.master} reachable")
        self._client(max(1.0, self.budget.left(self.budget.meet_by + GRACE_S)))
        self.mb.me = Slot(-1, 0)
        hello = self.wait_for("hello", self.budget.meet_by + GRACE_S, "the master's hello", on_token_problem=self._rejected)
        self.mb.run = hello["nonce"]
        self.timings["connected_s"] = round(self.budget.elapsed(), 3)

    def wait_for(self, kind: str, until: float, what: str, on_token_problem: Callable[[str], None] | None = None) -> dict:
        """Poll for the master's message until a deadline; invalid ones are findings, not answers."""
        token_problem_since = None
        while True:
            body = self.mb.read(kind)
            if body is not None:
                return body
            bad = [f for f in self.mb.findings if verdicts.is_token_problem(f)]
            if bad and on_token_problem is not None:
                token_problem_since = token_problem_since or time.monotonic()
                if time.monotonic() - token_problem_since >= TOKEN_PATIENCE_S:  # a forgery first, the real one later?
                    on_token_problem(bad[0].why)
            if time.monotonic() >= until:
                refused = [f for f in self.mb.findings if f.key == kind or f.key.startswith(kind)]
                why = (f"; the only message(s) there were invalid: {refused[-1].why} — is --token the same on every "
                       f"node?") if refused else ""
                raise ClusterNotAssembled(f"the master {self.cfg.master} never sent {what} within "
                                          f"{self.budget.elapsed():.0f} s{why}")
            time.sleep(POLL_S)

    def _rejected(self, why: str) -> None:
        """The master's messages do not verify with this node's token: say so to the master (it names this
        node in its verdict: the identity is sealed with this node's token) and stop."""
        try:
            if self.probe is None:
                self.open_probe()
            self.claim()
        except (StoreGone, StoreSilent, ClusterNotAssembled, UsageError):
            pass
        raise ClusterNotAssembled(f"this node is rejected: the master's messages fail verification ({why}); "
                                  f"fix: pass the same --token / DDPDOCTOR_TOKEN on every node")

    def meet(self) -> dict:
        roster = self.wait_for("roster", self.budget.meet_by + 2 * GRACE_S, "the roster")
        if roster["status"] == "aborted":
            raise ClusterNotAssembled(roster["message"])
        me = [n for n in roster["nodes"] if n["rank"] == self.mb.me.rank and n["claim"] == self.mb.me.claim]
        if not me or me[0].get("fresh") != self.fresh:
            why = roster["rejected"].get(f"ident/{self.mb.me.rank}/{self.mb.me.claim}",
                                         f"rank {self.mb.me.rank} was already taken when this node arrived (two "
                                         f"nodes with the same --node-rank?); the master names both")
            raise ClusterNotAssembled(f"this node (rank {self.mb.me.rank}) was not accepted by the master: {why}")
        return roster

    def share_dir(self, view: ClusterView) -> None:
        if not self.cfg.shared_dir:
            return
        try:
            until = min(time.monotonic() + self.cfg.timeout, self.budget.verdict_by - 3 * GRACE_S)
            shared = self.wait_for("shared", until, "the shared-dir nonce")
            view.shared_nonce = shared["nonce"]
        except ClusterNotAssembled:
            view.shared_nonce = None  # the shared-dir check says the nonce never came

    def links(self, view: ClusterView) -> dict:
        return self.wait_for("go", self.budget.verdict_by - GRACE_S, "the go for the collective test")

    def verdict(self, view: ClusterView) -> dict:
        body = self.wait_for("verdict", self.budget.end, "the verdict")
        try:
            self.mb.post("done", {"done": True})
        except (StoreGone, StoreSilent):
            pass  # the master may already be gone; the verdict is what mattered
        self.timings["verdict_s"] = round(self.budget.elapsed(), 3)
        return verdicts.worker_document(self.plan, self.run_settings(), body, self.timings, self.me["name"],
                                        self.mb.findings)
