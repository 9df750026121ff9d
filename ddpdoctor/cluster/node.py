"""One node's side of the protocol: the steps every node takes, in ``Node.run``, and the ones both roles
share; ``Master`` (master.py) and ``Worker`` (worker.py) fill in the steps where their roles differ.

  connect   raw TCP to the master first, failures classified (endpoint.py); the master posts the run nonce;
  claim     take a node rank and a claim on it, start the heartbeat, post a signed identity;
  meet      the master names the missing ranks at the meet deadline and posts the roster (roster.py);
  exchange  the master's checks publish, every node's gather will answer (exchange.py);
  gather    cluster-phase checks with the roster (mesh, clock, names...), facts posted (local checks ran
            meanwhile, on a thread of their own);
  go-ahead  the master collects the facts (a node found dead or silent is named, not waited for again),
            re-checks liveness and says whether the collective may run;
  collective every node runs it through the same store, results posted;
  verdict   the master compares everything (verdict.py) and posts the verdict; every node prints it.
"""
from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Callable

from .. import __version__, runner
from ..errors import ClusterNotAssembled, UsageError
from ..inputs import MAX_NODES
from . import endpoint as ep
from . import keyfile
from .budget import GRACE_S, PING_AFTER_S, Budget
from .config import JoinConfig
from .liveness import Heartbeats, dead_or_silent
from .mailbox import PREFIX, Mailbox, StoreGone, StoreSilent, bounded
from .messages import MAX_CLAIMS, Slot, about
from .probe import ProbeServer
from .progress import Progress
from .view import ClusterView

UNAUTHENTICATED_ALLOWS = ("anyone who can reach the rendezvous port can read this run's messages and forge "
                          "them: a node's facts, the roster, the verdict (a fake PASS or a fake failure)")
TOKEN_FIX = "export DDPDOCTOR_TOKEN=$(openssl rand -hex 16) in the job script, before the preflight starts on every node"
KEYLESS_FIX = ("a node that cannot read the run's key file (no shared home directory or --shared-dir) is not "
               "taken, nor is anyone else claiming its rank under the public names; fix: export "
               "DDPDOCTOR_TOKEN=$(openssl rand -hex 16) in the job script so every node has it, or, accepting that "
               "anyone who reaches the port could impersonate a node, pass --allow-unauthenticated on the master")


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64]
    except OSError:
        return None


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
        self.cleanups: list[Callable[[], None]] = []  # what checks asked to undo at the end (ClusterView.on_close)

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
            go = self.go_ahead(view)
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
                f"{about(last.key)}: {last.why}")

    def connect(self) -> None:
        raise NotImplementedError

    def meet(self) -> dict:
        raise NotImplementedError

    def exchange(self, view: ClusterView) -> None:
        """The master's checks publish (``Check.publish``), every node's gather answers: fills view.published."""
        raise NotImplementedError

    def go_ahead(self, view: ClusterView) -> dict:
        """Whether the collective runs: the master decides it (after collecting every node's facts), the
        workers wait for its word."""
        raise NotImplementedError

    def verdict(self, view: ClusterView) -> dict:
        raise NotImplementedError

    # -- steps shared by both roles ---------------------------------------------------------------------
    def _gather_local(self, box: dict) -> None:
        box["facts"], box["gather"] = runner.gather_phase(self.plan, "local", socket.gethostname(),
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
            shared_dir=self.cfg.shared_dir, code_dir=self.cfg.code_dir, pg_store=self.mb.pg_store, cleanups=self.cleanups,
            budget=self.budget, world_rank=[n["name"] for n in nodes].index(self.me["name"]),
        )

    def gather_cluster(self, view: ClusterView, local: dict) -> None:
        self.progress.say(f"{f'all {len(view.nodes)} nodes' if len(view.nodes) > 1 else 'the one node'} joined as "
                          f"{self.me['name']}; testing links")
        self.exchange(view)
        facts, gather = runner.gather_phase(self.plan, "cluster", self.me["name"], rank=self.rank, nnodes=self.cfg.nnodes,
                                     cluster=view, deadline=self.budget.verdict_by - 2 * GRACE_S)
        if not local:
            local = {"facts": {}, "gather": {lc.name: {"status": runner.TIMEOUT,
                                                       "message": "local checks did not finish in time"}
                                             for lc in self.plan.phase("local")}}
        facts.update(local.get("facts", {}))
        gather.update(local.get("gather", {}))
        self.mb.post("facts", {"facts": facts, "gather": gather})
        self.timings["facts_published_s"] = round(self.budget.elapsed(), 3)

    def collective(self, view: ClusterView, go: dict) -> None:
        checks = self.plan.phase("collective")
        if go["go"] and checks:
            self.progress.say("links passed; running the collective smoke test")
            box: dict = {}
            work = threading.Thread(target=lambda: box.update(result=runner.gather_phase(
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
        peers = [n for n in view.nodes if n["name"] != self.me["name"]
                 # a node without the run's key cannot read the sealed heartbeats of the nodes with it
                 and (not self.mb.blind or Slot(n["rank"], n["claim"]) in self.mb.open_slots)]
        while work.is_alive() and time.monotonic() < self.budget.verdict_by:
            work.join(1.0)
            if not work.is_alive():
                break
            # a killed peer is named at once by its closed probe listener, a frozen one after SILENT_S
            for nm, why in dead_or_silent(self.mb, beats, peers, "during the collective", ping_after=PING_AFTER_S).items():
                self.note_silent(nm, why)
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
        self.progress.close()
        self._beating.clear()
        if self.probe is not None:
            self.probe.close()
        if self.keyfiles is not None:
            self.keyfiles.remove()
        self.run_cleanups()

    def run_cleanups(self) -> None:
        """Undo what checks asked to undo (the shared-dir check's file on the master), once, even on SIGTERM."""
        while self.cleanups:
            try:
                self.cleanups.pop()()
            except Exception:  # noqa: BLE001 - a plugin's cleanup must not hide the run's outcome
                pass

