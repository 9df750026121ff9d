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
from . import keyfile, launcher_env
from . import roster as rosters
from . import verdict as verdicts
from .budget import GRACE_S, SILENT_S, Budget
from .mailbox import (MAX_CLAIMS, PREFIX, Finding, Invalid, Mailbox, Slot, StoreGone, StoreSilent, about, bounded,
                      key_id, key_of)
from .probe import ProbeServer
from .view import ClusterView

POLL_S = 0.2
# What the master collects from every node, in a user's words (progress lines and silent nodes' findings).
COLLECTED = {"facts": "check results", "cfacts": "collective test results"}
mailbox_tampered = "tampered"  # mailbox.TAMPERED
TOKEN_PATIENCE_S = 3.0  # how long a node waits for a valid hello beside one signed with another token
OPEN_GRACE_S = 3.0  # a rank held only by a node without the run's key waits this long for one with it

UNAUTHENTICATED_ALLOWS = ("anyone who can reach the rendezvous port can read this run's messages and forge "
                          "them: a node's facts, the roster, the verdict (a fake PASS or a fake failure)")
TOKEN_FIX = "export DDPDOCTOR_TOKEN=$(openssl rand -hex 16) in the job script, before the preflight starts on every node"


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
        info = launcher_env.from_env(env, read_file=launcher_env.read_node_file, hostname=socket.gethostname())
    if info.local_rank not in (None, 0):
        return None  # one preflight per node
    master_text = master or info.master
    if not master_text:
        raise UsageError("no master endpoint: pass --master HOST:PORT (or set MASTER_ADDR and MASTER_PORT)")
    endpoint = ep.parse_endpoint(master_text, default_port=29500)
    where = "--nnodes" if nnodes else f"the node count from the {info.source} environment"
    nnodes = nnodes or info.nnodes
    if not nnodes:
        raise UsageError("number of nodes unknown: pass --nnodes N")
    if not 1 <= nnodes <= MAX_NODES:
        raise UsageError(f"{where} {nnodes}: expected 1..{MAX_NODES}")
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

    from .mailbox import HOST_RE

    try:
        ipaddress.ip_address(text.split("%")[0])
        return True
    except ValueError:
        return bool(HOST_RE.match(text))


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
        _import_torch_distributed()
    except Exception as exc:  # noqa: BLE001 - a broken torch: ImportError, a missing shared library, ...
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        seen = "the other nodes report the master unreachable" if is_master else "the master reports it missing"
        raise ClusterNotAssembled(f"this node cannot join: torch does not import here ({reason}); the nodes meet "
                                  f"on torch's TCPStore, so {seen}. Fix: `{sys.executable} -m pip install torch` in "
                                  "the environment the job runs in (`ddpdoctor preflight` alone lists this node's "
                                  "other findings)") from exc

    role = Master if is_master else Worker
    return role(cfg, plan, budget).run()


def _import_torch_distributed() -> None:
    """Import torch with SIGTERM and SIGINT held back: a Python handler that raises inside torch's native
    initialisation ends the process with `terminate called ... error_already_set` (rc -6). Held back, the
    signal is delivered the moment the import is done, and unwinds like any other (exit 143/130)."""
    import signal

    held = {signal.SIGTERM, signal.SIGINT}
    on_main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held) if on_main else None
    try:
        import torch.distributed  # noqa: F401 - see run_node's docstring
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


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
        self.tampered: set[str] = set()  # nodes whose heartbeat someone else overwrote: not judged by it

    def stalled(self, mb: Mailbox, names: list[str]) -> dict[str, float]:
        """Read the heartbeats of ``names`` once; those unchanged for SILENT_S, with the seconds of silence.
        A heartbeat overwritten by someone else, or going backwards (an old value replayed), proves nothing
        about the node: its silence clock restarts, so interference never blames a healthy node."""
        beats = mb.beats([self.slots[nm] for nm in names])
        now = time.monotonic()
        out = {}
        for nm in names:
            value = beats.get(self.slots[nm])
            value = 0 if value is None else value
            last, since = self.seen.get(nm, (-1, now))
            if value == mailbox_tampered or (isinstance(last, int) and isinstance(value, int) and value < last):
                self.tampered.add(nm)
                self.seen[nm] = (last, now)
                continue
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
        self.keyfiles: keyfile.KeyFiles | None = None  # the master's key files, removed at the end
        self.key_path: Path | None = None  # where this node found the run's key
        self.shared_file: Path | None = None

    # -- authentication ---------------------------------------------------------------------------------
    def auth_mode(self) -> str:
        """token (--token), key (the run's key file) or none: how this node's own messages are sealed."""
        if self.cfg.token:
            return "token"
        return "key" if self.mb is not None and self.mb.token else "none"

    def auth_state(self, open_nodes: list[str] | None = None) -> dict:
        """What goes into the verdict and the JSON: whether the run was authenticated, how, and what not."""
        mode = self.auth_mode()
        open_nodes = sorted(open_nodes or [])
        ok = mode != "none" and not open_nodes
        state = {"authenticated": ok, "mode": mode, "open_nodes": open_nodes}
        if mode == "key" and self.key_path is not None:
            state["key_file"] = str(self.key_path)
        if not ok:
            who = (f"node(s) {', '.join(open_nodes[:8])} had no access to the run's key file" if open_nodes and
                   mode != "none" else "no --token was given and the nodes share no key file (no shared home or "
                   "--shared-dir)")
            state["note"] = f"this run was not authenticated: {who}; {UNAUTHENTICATED_ALLOWS}"
            state["fix"] = TOKEN_FIX
        return state

    def say_auth(self) -> None:
        """At start: every node says how its messages are protected (unauthenticated: even with -q)."""
        mode = self.auth_mode()
        if mode == "token":
            self.progress.say("messages are authenticated with --token")
        elif mode == "key":
            self.progress.say(f"messages are authenticated with this run's key file ({self.key_path})")
        else:
            text = (f"WARNING: this run is NOT authenticated (no --token, no key file shared with the master): "
                    f"{UNAUTHENTICATED_ALLOWS}; fix: {TOKEN_FIX}")
            quiet = self.progress.quiet
            self.progress.quiet = False
            self.progress.say(text)
            self.progress.quiet = quiet

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
            self.close()  # also on SIGTERM and Ctrl-C: both unwind through here

    def _refused_note(self) -> str:
        """What this node refused before the master went quiet: a replayed or forged message in its way
        explains more than the silence (the master may have given up on this node because of it)."""
        findings = self.mb.findings if self.mb is not None else []
        if not findings:
            return ""
        last = findings[-1]
        return (f"; before that this node ignored {len(findings)} invalid message(s), the last in place of "
                f"{about(last.key)} (at {last.key}): {last.why}")

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
        claim = self.mb.take_claim(self.rank, self.fresh)
        if not claim:
            raise ClusterNotAssembled(f"rank {self.rank} was claimed {MAX_CLAIMS} times before this node came: "
                                      f"other nodes with the same --node-rank, or something else writing to the "
                                      f"rendezvous port; fix: {TOKEN_FIX}")
        self.mb.me = Slot(self.rank, claim)
        self._beating.set()
        threading.Thread(target=self._heartbeat, name="ddpdoctor-heartbeat", daemon=True).start()
        self.mb.post("ident", self._identity())

    def _heartbeat(self) -> None:
        """A counter that moves while this process runs: a frozen node (SIGSTOP, D state) stops it."""
        me = self.mb.me
        for n in range(int(self.budget.total_s) + 60):  # bounded: the run ends before this does
            if not self._beating.is_set():
                return
            try:
                self.mb.post("beat", {"n": n + 1}, slot=me, replace=True)
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
        peers = [n["name"] for n in view.nodes if n["name"] != self.me["name"]
                 # a node without the run's key cannot read the sealed heartbeats of the nodes with it
                 and (not self.mb.blind or Slot(n["rank"], n["claim"]) in self.mb.open_slots)]
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
        if self.keyfiles is not None:
            self.keyfiles.remove()
        self._remove_shared_file()

    def _remove_shared_file(self) -> None:
        path, self.shared_file = self.shared_file, None
        if path is not None:
            try:
                path.unlink()
            except OSError:
                pass


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
        hello = {"protocol": 1, "nonce": self.mb.run, "nnodes": cfg.nnodes, "t": time.time()}
        if not cfg.token:
            self._make_key(hello)
        self.say_auth()
        self.mb.post("hello", hello)
        self.timings["connected_s"] = round(self.budget.elapsed(), 3)

    def _make_key(self, hello: dict) -> None:
        """No --token: the run's own key, in a file the other nodes can read if they share a filesystem."""
        cfg = self.cfg
        paths = keyfile.candidates(keyfile.scope(str(cfg.master), cfg.rdzv_id, cfg.nnodes), cfg.shared_dir)
        self.keyfiles = keyfile.create(paths)
        if not self.keyfiles.paths:
            self.keyfiles = None
            return
        self.key_path = self.keyfiles.paths[0]
        self.mb.token = self.keyfiles.key
        self.mb.sealed = True
        self.mb.open_allowed = True
        hello["key_id"] = key_id(self.mb.token, self.mb.run)

    def meet(self) -> dict:
        n = self.cfg.nnodes
        valid: dict[int, list[dict]] = {}
        read: set = set()
        self._next_claim: dict[tuple[int, bool], int] = {}
        all_in_since = None
        while True:
            self._read_idents(valid, read)
            missing = [r for r in range(n) if r not in valid]
            if not missing and self._open_ranks(valid):  # held only by nodes without the key: one may come
                all_in_since = all_in_since or time.monotonic()
                if time.monotonic() - all_in_since < OPEN_GRACE_S and time.monotonic() < self.budget.meet_by:
                    time.sleep(POLL_S)
                    continue
            if not missing or time.monotonic() >= self.budget.meet_by:
                break
            self.progress.say(f"{n - len(missing)}/{n} nodes joined; waiting for rank(s) "
                              f"{rosters.ranks_text(missing[:20])}" + (" ..." if len(missing) > 20 else ""), dedupe=True)
            time.sleep(POLL_S)
        self._read_idents(valid, read)  # late claims of ranks already present (duplicates) are named too
        self._valid, self._read = valid, read  # read again at the verdict: a claim after the roster is named
        self._prefer_keyed(valid)
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
            self.mb.post("roster", rosters.aborted(msg), public_copy=self.mb.sealed and not self.cfg.token)
            self._linger(time.monotonic() + 2.0)
            raise ClusterNotAssembled(msg)
        open_slots = [(i["rank"], i["claim"]) for i in idents if not i.pop("_keyed", True)]
        self.mb.open_slots = {Slot(*s) for s in open_slots}
        roster = rosters.accepted(idents, self.rejected)
        roster["auth"] = {"mode": self.auth_mode(), "open": [list(s) for s in open_slots]}
        self.mb.post("roster", roster)
        return roster

    def _open_ranks(self, valid: dict[int, list[dict]]) -> list[int]:
        """Ranks held only by nodes without the run's key (while the master has one)."""
        if not self.mb.sealed or self.cfg.token:
            return []
        return [r for r, idents in valid.items() if not any(i.get("_keyed") for i in idents)]

    def _prefer_keyed(self, valid: dict[int, list[dict]]) -> None:
        """A node with the run's key outranks unsigned identities for its rank: those are named, not taken
        (anyone can write one; only a node of this run has the key)."""
        for r, idents in valid.items():
            if any(i.get("_keyed") for i in idents):
                for i in [i for i in idents if not i.get("_keyed")]:
                    self.rejected[f"ident/{r}/{i['claim']}"] = (f"an identity without the run's key for rank {r}, "
                                                                f"held by a node with the key ({i.get('host')})")
                valid[r] = [i for i in idents if i.get("_keyed")]

    def _namespaces(self) -> list[bool]:
        """Where identities can be: sealed names (--token, or the run's key), and the public ones for nodes
        without the key (with --token every node has it: what is under the public names is only named, e.g.
        a node with another token)."""
        return [True, False] if self.mb.sealed else [False]

    def _read_idents(self, valid: dict[int, list[dict]], read: set) -> None:
        """Every claim of every rank not yet read; an invalid identity becomes a finding, its slot is done.
        Claim slots are found one more per rank and poll (each a compare_set slot that exists or not)."""
        nxt = self._next_claim
        probes = {(r, sealed): (r, nxt.setdefault((r, sealed), 1), sealed)
                  for r in range(self.cfg.nnodes) for sealed in self._namespaces()
                  if nxt.get((r, sealed), 1) <= MAX_CLAIMS}
        for label, there in (self.mb.claimed(probes).items() if probes else ()):
            if there:
                nxt[label] += 1
        for (r, sealed), upto in nxt.items():
            for claim in range(1, upto):
                slot = Slot(r, claim)
                if (slot, sealed) in read:
                    continue
                ident = self.mb.read("ident", slot, sealed=sealed)
                if ident is not None:  # an invalid one is re-read: the real node may append after a forgery
                    ident["_keyed"] = sealed
                    valid.setdefault(r, []).append(ident)
                    read.add((slot, sealed))

    def share_dir(self, view: ClusterView) -> None:
        if not self.cfg.shared_dir:
            return
        nonce = secrets.token_hex(16)
        path = Path(self.cfg.shared_dir) / f".ddpdoctor-shared-{nonce[:8]}"
        try:
            self.shared_file = path  # before it exists: a SIGTERM during the write still removes it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, nonce.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            self.shared_file = None
            nonce = f"unwritable: {exc}"
        view.shared_nonce = nonce
        view.extra["shared_file"] = str(path)
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
        # where the full summary and the cluster result are: the other nodes print one line pointing here
        where = {"node": self.me["name"], "host": self.me["host"], "output_dir": self.plan.run.get("output_dir")}
        doc.update(this_node=self.me["name"], role="master", master=where,
                   auth=self.auth_state([n["name"] for n in view.nodes
                                         if Slot(n["rank"], n["claim"]) in self.mb.open_slots]))
        self.mb.post("verdict", verdicts.published(doc) | {"master": where})
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
        late = [i for idents in self._valid.values() for i in idents if (i["rank"], i["claim"]) not in in_roster
                and (i.get("_keyed", True) or not self.mb.sealed)]  # an unsigned one beside a keyed run is junk
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
                    self.silent[nm] = f"sent no {COLLECTED[kind]} within {self.budget.elapsed():.0f} s of the start"
                break
            if time.monotonic() - last_liveness > 1.0:
                last_liveness = time.monotonic()
                self._check_liveness(view, only=set(waiting))
                for nm in [nm for nm in waiting if nm in self.silent]:
                    del waiting[nm]
                names = ", ".join(sorted(waiting)[:10]) + (f" (+{len(waiting) - 10} more)" if len(waiting) > 10 else "")
                self.progress.say(f"waiting for the {COLLECTED[kind]} of {names}", dedupe=True)
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
        pending = {self.mb.name(key_of("done", Slot(n["rank"], n["claim"])),
                                self.mb._sealed_for(Slot(n["rank"], n["claim"]))): Slot(n["rank"], n["claim"])
                   for n in readers or []}
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



class Worker(Node):
    """Any node but rank 0: reaches the master, joins, and takes the master's verdict once it verifies."""

    def connect(self) -> None:
        cfg = self.cfg

        def tick(attempt: int, result: ep.PingResult, left: float) -> None:
            if not result.ok and attempt % 4 == 1:
                # under srun every node starts at once: the master not listening yet is the usual first answer
                self.progress.say(f"master {cfg.master} not answering yet ({result.error_class}); retrying for "
                                  f"{left:.0f} s more")

        outcome = ep.wait_for_endpoint(cfg.master, self.budget.meet_by, nnodes=cfg.nnodes,
                                       allow_loopback=cfg.allow_loopback, on_attempt=tick)
        if not outcome.ok:
            raise ClusterNotAssembled(
                f"cannot reach the master {cfg.master} ({outcome.addr or 'unresolved'}): {outcome.error_class} "
                f"after {outcome.seconds:.1f} s, {outcome.attempts} attempt(s); fix: {outcome.fix}")
        self.progress.say(f"master {cfg.master} reachable")
        self._client(max(1.0, self.budget.left(self.budget.meet_by + GRACE_S)))
        self.mb.me = Slot(-1, 0)
        hello = self._hello(self.budget.meet_by + GRACE_S)
        self.mb.run = hello["nonce"]
        self.say_auth()
        self.timings["connected_s"] = round(self.budget.elapsed(), 3)

    def _hello(self, until: float) -> dict:
        """The master's hello. With a secret (--token, or this run's key file) only a hello that verifies
        with it, the newest when an older run's is replayed beside it; without one, the first valid hello,
        and this node says it is unauthenticated."""
        token_problem_since = None
        key_searched = False
        while True:
            hellos = self.mb.hellos()
            if self.cfg.token:
                good = []
                for frame, body in hellos:
                    why = self._why_not(frame, self.cfg.token)
                    if why is None:
                        good.append(body)
                    else:
                        self.mb._note("hello", frame, why)
                if good:
                    return self._newest(good)
                bad = [f for f in self.mb.findings if verdicts.is_token_problem(f)]
                if bad:
                    token_problem_since = token_problem_since or time.monotonic()
                    if time.monotonic() - token_problem_since >= TOKEN_PATIENCE_S:  # a forgery first, the real one later?
                        self._rejected(bad[0].why)
            elif hellos:
                keyed = [(f, b) for f, b in hellos if b.get("key_id")]
                if keyed and not key_searched:
                    key_searched = True
                    paths = keyfile.candidates(keyfile.scope(str(self.cfg.master), self.cfg.rdzv_id, self.cfg.nnodes),
                                               self.cfg.shared_dir)
                    key, path = keyfile.find(paths, lambda k: any(self._this_runs_key(k, f, b) for f, b in keyed),
                                             min(until, time.monotonic() + keyfile.KEY_WAIT_S))
                    if key is not None:
                        self.mb.token, self.mb.sealed, self.key_path = key, True, path
                        return self._newest([b for f, b in keyed if self._this_runs_key(key, f, b)])
                self.mb.blind = bool(keyed)  # the master signs with a key this node does not have
                return hellos[0][1]
            if time.monotonic() >= until:
                refused = [f for f in self.mb.findings if f.key == "hello"]
                why = (f"; the only message(s) there were invalid: {refused[-1].why} — is --token the same on every "
                       f"node?") if refused else ""
                raise ClusterNotAssembled(f"the master {self.cfg.master} never sent its hello within "
                                          f"{self.budget.elapsed():.0f} s{why}")
            time.sleep(POLL_S)

    @staticmethod
    def _why_not(frame: bytes, secret: str) -> str | None:
        from .mailbox import open_envelope

        try:
            open_envelope(frame, token=secret, run=None, key="hello", sender=None, from_master=True)
            return None
        except Invalid as exc:
            return str(exc)

    def _this_runs_key(self, key: str, frame: bytes, body: dict) -> bool:
        return key_id(key, body["nonce"]) == body.get("key_id") and self._why_not(frame, key) is None

    def _newest(self, bodies: list[dict]) -> dict:
        """Of several hellos that verify (a --token reused across runs lets an older run's be replayed beside
        this one's), the newest: the replayed ones are named."""
        best = max(bodies, key=lambda b: b.get("t", 0))
        for b in bodies:
            if b is not best and b["nonce"] != best["nonce"]:
                self.mb.findings.append(Finding(key="hello", why="an older run's hello, replayed beside this run's "
                                                "(sealed for another run)", claimed="rank 0"))
        return best

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
                refused = [f for f in self.mb.findings if f.key == key_of(kind)]
                why = (f"; the only message(s) there (at {key_of(kind)}) were invalid: {refused[-1].why} — is --token "
                       f"the same on every node?") if refused else ""
                raise ClusterNotAssembled(f"the master {self.cfg.master} never sent {what} within "
                                          f"{self.budget.elapsed():.0f} s{why}")
            time.sleep(POLL_S)

    def _rejected(self, why: str) -> None:
        """The master's messages do not verify with this node's token: say so to the master (it names this
        node in its verdict: the identity is sealed with this node's token) and stop."""
        try:
            if self.probe is None:
                self.open_probe()
            self.mb.sealed = False  # this run's sealed names need its token: say it where the master looks
            self.claim()
        except (StoreGone, StoreSilent, ClusterNotAssembled, UsageError):
            pass
        raise ClusterNotAssembled(f"this node is rejected: the master's messages fail verification ({why}); "
                                  f"fix: pass the same --token / DDPDOCTOR_TOKEN on every node")

    def meet(self) -> dict:
        roster = self.wait_for("roster", self.budget.meet_by + 2 * GRACE_S, about("roster"))
        if roster["status"] == "aborted":
            raise ClusterNotAssembled(roster["message"])
        opened = roster.get("auth", {}).get("open", [])
        self.mb.open_slots = {Slot(*s) for s in opened if isinstance(s, list) and len(s) == 2
                              and all(isinstance(x, int) for x in s)}
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
            shared = self.wait_for("shared", until, about(key_of("shared")))
            view.shared_nonce = shared["nonce"]
        except ClusterNotAssembled:
            view.shared_nonce = None  # the shared-dir check says the nonce never came

    def links(self, view: ClusterView) -> dict:
        return self.wait_for("go", self.budget.verdict_by - GRACE_S, about(key_of("go")))

    def verdict(self, view: ClusterView) -> dict:
        body = self.wait_for("verdict", self.budget.end, "the verdict")
        try:
            self.mb.post("done", {"done": True})
        except (StoreGone, StoreSilent):
            pass  # the master may already be gone; the verdict is what mattered
        self.timings["verdict_s"] = round(self.budget.elapsed(), 3)
        open_nodes = [n["name"] for n in view.nodes if Slot(n["rank"], n["claim"]) in self.mb.open_slots]
        auth = self.auth_state(open_nodes + ([self.me["name"]] if self.mb.blind else []))

        def advice(results):
            from .advice import advice_lines

            return advice_lines(body["nodes"], view, self.cfg, results)

        doc = verdicts.worker_document(self.plan, self.run_settings(), body, self.timings, self.me["name"],
                                       self.mb.findings, auth=auth, advice_fn=advice)
        # the master's results come first; what follows only this node saw (messages it refused)
        return doc | {"master": {**(body.get("master") or {}), "results": len(body["results"])}}
