"""The multi-node preflight: nodes meet on torch's TCPStore, exchange JSON facts, test links, share one verdict.

Sequence on every node (the master is node rank 0 and hosts the store, unless torchrun's agent already
hosts one):
 1. raw TCP to the master endpoint, failures classified (endpoint.py); local gathers start meanwhile;
 2. claim a node rank, publish a signed identity (with this node's probe listener);
 3. the master waits for every rank until the deadline, names the missing ones, publishes the roster;
 4. cluster-phase gathers (mesh, clock, names, shared dir...) using the roster; facts published;
 5. the master collects facts (a silent node whose probe refuses is declared dead at once), decides
    whether the links allow a collective, every node runs it through the same store;
 6. the master compares everything and publishes the verdict; every node prints it and exits with its code.
Every wait is bounded by the deadline; a missing master or node ends in ClusterNotAssembled (exit 3).
"""
from __future__ import annotations

import datetime
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .. import __version__, model, runner
from ..api import Level, Result
from ..errors import ClusterNotAssembled, UsageError
from . import endpoint as ep
from . import launcher_env, signing
from .probe import ProbeServer
from .view import ClusterView

PREFIX = "ddpdoctor"
POLL_S = 0.2
GRACE_S = 5.0  # how much longer a non-master waits than its own deadline, for the master's last word


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


# ----------------------------------------------------------------------------------------------------
# Parsing: flags and the launcher's environment become a JoinConfig.


def config_from_flags(*, master, nnodes, node_rank, local_addr, timeout, token, nproc_per_node, rdzv_id,
                      code_dir, shared_dir, quiet, env=None) -> JoinConfig | None:
    """Returns None when this process should not run a node preflight (a torchrun worker with LOCAL_RANK > 0)."""
    env = os.environ if env is None else env
    info = launcher_env.from_env(env, read_file=lambda p: Path(p).read_text(), hostname=socket.gethostname())
    if info.source == "torchrun" and int(env.get("LOCAL_RANK", "0") or 0) != 0:
        return None  # one preflight per node: local rank 0 speaks for the node
    master_text = master or info.master
    if not master_text:
        raise UsageError("no master endpoint: pass --master HOST:PORT (or set MASTER_ADDR and MASTER_PORT)")
    endpoint = ep.parse_endpoint(master_text, default_port=29500)
    nnodes = nnodes or info.nnodes
    if not nnodes:
        raise UsageError("number of nodes unknown: pass --nnodes N")
    if node_rank is None:
        node_rank = info.node_rank
    if node_rank is not None and node_rank >= nnodes:
        raise UsageError(f"--node-rank {node_rank} is not below --nnodes {nnodes}")
    if shared_dir is not None and not Path(shared_dir).is_dir():
        raise UsageError(f"--shared-dir {shared_dir}: not a directory on this node")
    if code_dir is not None and not Path(code_dir).is_dir():
        raise UsageError(f"--code {code_dir}: not a directory")
    return JoinConfig(
        master=endpoint, nnodes=nnodes, node_rank=node_rank, local_addr=local_addr, timeout=timeout,
        token=token or None, nproc_per_node=nproc_per_node or info.nproc_per_node, rdzv_id=rdzv_id,
        code_dir=code_dir, shared_dir=shared_dir, external_store=info.source == "torchrun",
        launcher=info.source, quiet=quiet,
    )


def run_from_cli(plan, *, master, nnodes, node_rank, local_addr, timeout, token, nproc_per_node, rdzv_id,
                 code_dir, shared_dir, local_nodes, quiet, worker_argv: Callable[[int, int, str], list[str]] | None = None):
    if local_nodes:
        from .local import run_local_cluster

        return run_local_cluster(local_nodes, timeout=timeout, worker_argv=worker_argv, quiet=quiet)
    cfg = config_from_flags(master=master, nnodes=nnodes, node_rank=node_rank, local_addr=local_addr,
                            timeout=timeout, token=token, nproc_per_node=nproc_per_node, rdzv_id=rdzv_id,
                            code_dir=code_dir, shared_dir=shared_dir, quiet=quiet)
    if cfg is None:
        return None
    return Node(cfg, plan).run()


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
        print(f"[ddpdoctor {self.label}] {text}", file=sys.stderr, flush=True)


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(0.1, seconds))


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _names(idents: list[dict]) -> None:
    """Give every node a unique, readable name: its hostname, then host@addr, then host@addr#rank."""
    def count(key):
        seen: dict[str, int] = {}
        for i in idents:
            seen[key(i)] = seen.get(key(i), 0) + 1
        return seen

    by_host = count(lambda i: i["host"])
    by_addr = count(lambda i: f"{i['host']}@{i['addr']}")
    for i in idents:
        if by_host[i["host"]] == 1:
            i["name"] = i["host"]
        elif by_addr[f"{i['host']}@{i['addr']}"] == 1:
            i["name"] = f"{i['host']}@{i['addr']}"
        else:
            i["name"] = f"{i['host']}@{i['addr']}#r{i['rank']}" + (f".{i['claim']}" if i["claim"] > 1 else "")


class Node:
    def __init__(self, cfg: JoinConfig, plan):
        self.cfg = cfg
        self.plan = plan
        self.start = time.monotonic()
        self.deadline = self.start + cfg.timeout
        self.rank = cfg.node_rank
        self.progress = Progress(cfg.quiet, f"rank {cfg.node_rank if cfg.node_rank is not None else '?'}")
        self.store = None
        self.server_store = None
        self.probe: ProbeServer | None = None
        self.timings: dict[str, float] = {}

    # -- helpers --------------------------------------------------------------------------------------
    def _mark(self, name: str) -> None:
        self.timings[name] = round(time.monotonic() - self.start, 3)

    def _remaining(self, extra: float = 0.0) -> float:
        return self.deadline + extra - time.monotonic()

    def _set(self, key: str, payload: Any) -> None:
        self.store.set(key, signing.seal(payload, self.cfg.token))

    def _get(self, key: str, *, verify: bool = True) -> Any:
        return signing.unseal(self.store.get(key), self.cfg.token, verify=verify)

    def _has(self, key: str) -> bool:
        return self.store.check([key])

    def _wait_key(self, key: str, until: float, what: str, on_tick: Callable[[], None] | None = None) -> bool:
        """Poll for a key until a monotonic deadline (polling keeps Ctrl-C responsive and the wait bounded)."""
        while True:
            try:
                if self._has(key):
                    return True
            except Exception as exc:  # noqa: BLE001 - the store's connection died with the master
                raise ClusterNotAssembled(
                    f"the master {self.cfg.master} stopped answering while this node waited for {what} ({exc})"
                ) from exc
            if on_tick:
                on_tick()
            if time.monotonic() >= until:
                return False
            time.sleep(POLL_S)

    def _am_master(self) -> bool:
        if self.rank is not None:
            return self.rank == 0
        local = self.cfg.local_addr
        try:
            master_addrs = ep.resolve(self.cfg.master.host)
        except socket.gaierror:
            return False
        if local:
            return local in master_addrs
        import psutil

        mine = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
        return any(a in mine for a in master_addrs) and not any(ep.is_loopback(a) for a in master_addrs)

    # -- the run --------------------------------------------------------------------------------------
    def run(self) -> dict:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # c10d's socket warnings are noise here
        local_box: dict = {}
        local_thread = threading.Thread(target=self._gather_local, args=(local_box,), daemon=True)
        local_thread.start()
        try:
            is_master = self._am_master()
            if is_master and self.rank is None:
                self.rank = 0
            self._connect(is_master)
            self._open_probe()
            roster = self._join(is_master)
            local_thread.join(max(0.0, self._remaining(30)))
            return self._phases(is_master, roster, local_box)
        finally:
            self._close()

    def _gather_local(self, box: dict) -> None:
        from ..preflight import gather_phase

        box["facts"], box["gather"] = gather_phase(self.plan, "local", socket.gethostname(),
                                                   rank=self.rank or 0, nnodes=self.cfg.nnodes)

    def _connect(self, is_master: bool) -> None:
        cfg = self.cfg
        import torch.distributed as dist  # the store is torch's own: the engine torchrun uses

        # Loopback is fine when this node says it is a simulated node on loopback, or when torchrun's agents
        # already met at that address (then every node is on this machine).
        allow_loopback = bool(cfg.local_addr and ep.is_loopback(cfg.local_addr)) or cfg.external_store
        if is_master and not cfg.external_store:
            try:
                master_addrs = ep.resolve(cfg.master.host)
            except socket.gaierror as exc:
                raise ClusterNotAssembled(f"master {cfg.master}: {cfg.master.host!r} does not resolve ({exc}); "
                                          f"fix: {ep.FIXES[ep.DNS]}") from exc
            if cfg.nnodes > 1 and ep.is_loopback(master_addrs[0]) and not allow_loopback:
                raise ClusterNotAssembled(f"master {cfg.master} resolves to {master_addrs[0]} (loopback) but "
                                          f"{cfg.nnodes} nodes are expected; fix: {ep.FIXES[ep.LOOPBACK]}")
            try:
                self.server_store = dist.TCPStore(cfg.master.host, cfg.master.port, None, True,
                                                  _timedelta(cfg.timeout), wait_for_workers=False)
            except Exception as exc:  # noqa: BLE001
                raise ClusterNotAssembled(f"cannot listen on {cfg.master} as the master: {exc} "
                                          f"(is another preflight or job using port {cfg.master.port}?)") from exc
            self.progress.say(f"hosting the rendezvous store on {cfg.master}")
        else:
            def tick(attempt: int, result: ep.PingResult, left: float) -> None:
                if not result.ok and attempt % 4 == 1:
                    self.progress.say(f"master {cfg.master}: {result.error_class}, retrying for {left:.0f} s more")

            outcome = ep.wait_for_endpoint(cfg.master, self.deadline, nnodes=cfg.nnodes,
                                           allow_loopback=allow_loopback, on_attempt=tick)
            if not outcome.ok:
                raise ClusterNotAssembled(
                    f"cannot reach the master {cfg.master} ({outcome.addr or 'unresolved'}): {outcome.error_class} "
                    f"after {outcome.seconds:.1f} s, {outcome.attempts} attempt(s); fix: {outcome.fix}"
                )
            self.progress.say(f"master {cfg.master} reachable")
        client_timeout = max(1.0, self._remaining(GRACE_S))
        try:
            raw = dist.TCPStore(cfg.master.host, cfg.master.port, None, False, _timedelta(client_timeout))
        except Exception as exc:  # noqa: BLE001
            raise ClusterNotAssembled(f"the master {cfg.master} accepted TCP but its store did not answer: {exc}") from exc
        prefix = PREFIX if not cfg.external_store else f"{PREFIX}/{cfg.rdzv_id or os.environ.get('TORCHELASTIC_RUN_ID', 'run')}"
        self.store = dist.PrefixStore(prefix, raw)
        self._mark("connected_s")

    def _open_probe(self) -> None:
        addr = self.cfg.local_addr or ep.source_addr_towards(self.cfg.master.host) or "0.0.0.0"
        try:
            self.probe = ProbeServer(addr)
        except OSError as exc:
            raise UsageError(f"--local-addr {addr}: cannot listen there ({exc.strerror or exc}); "
                             f"is it an address of this machine?") from exc

    def _identity(self, claim: int) -> dict:
        cfg = self.cfg
        host = socket.gethostname()
        return {
            "rank": self.rank, "claim": claim, "host": host, "fqdn": socket.getfqdn(), "addr": self.probe.addr,
            "probe_port": self.probe.port, "pid": os.getpid(), "boot_id": _boot_id(), "tool_version": __version__,
            "launcher": cfg.launcher,
            "launch": {"nnodes": cfg.nnodes, "nproc_per_node": cfg.nproc_per_node, "rdzv_id": cfg.rdzv_id,
                       "endpoint": str(cfg.master)},
            "checks": sorted(lc.name for lc in self.plan.checks),
        }

    def _join(self, is_master: bool) -> dict:
        if self.rank is None:
            self.rank = int(self.store.add("assign", 1))  # ranks 1..N-1 by arrival; the master is 0
            if self.rank >= self.cfg.nnodes:
                raise ClusterNotAssembled(f"more nodes arrived than --nnodes {self.cfg.nnodes}: this node was "
                                          f"number {self.rank + 1}; fix: give every node the same --nnodes")
        self.progress.label = f"rank {self.rank}"
        claim = int(self.store.add(f"claim/{self.rank}", 1))
        self._set(f"ident/{self.rank}/{claim}", self._identity(claim))
        if is_master:
            roster = self._collect_roster()
            self._set("roster", roster)
        else:
            if not self._wait_key("roster", self.deadline + GRACE_S, "the roster"):
                raise ClusterNotAssembled(f"the master {self.cfg.master} never published the roster within "
                                          f"{self.cfg.timeout:g} s (+{GRACE_S:g} s)")
            roster = self._get("roster", verify=False)
        self._mark("joined_s")
        me_key = f"{self.rank}/{claim}"
        if roster.get("status") == "aborted":
            raise ClusterNotAssembled(roster["message"])
        if me_key in roster.get("rejected", {}):
            reason = roster["rejected"][me_key]
            raise ClusterNotAssembled(f"this node was rejected by the master: {reason}")
        try:  # now that the roster is known, check the master's signature like every other message
            self._get("roster")
        except signing.BadSignature as exc:
            raise ClusterNotAssembled("the roster is not signed with this node's token: check --token") from exc
        self.me = next(n for n in roster["nodes"] if f"{n['rank']}/{n['claim']}" == me_key)
        return roster

    def _collect_roster(self) -> dict:
        n = self.cfg.nnodes
        keys = [f"ident/{r}/1" for r in range(n)]
        while True:
            present = [r for r, k in enumerate(keys) if self._has(k)]
            missing = [r for r in range(n) if r not in present]
            if not missing:
                break
            self.progress.say(f"{len(present)}/{n} nodes joined; waiting for rank(s) {_ranks(missing)}", dedupe=True)
            if time.monotonic() >= self.deadline:
                break
            time.sleep(POLL_S)
        idents, rejected = [], {}
        for r in range(n):
            claim = 1
            while self._has(f"ident/{r}/{claim}") and claim <= 16:
                blob = self.store.get(f"ident/{r}/{claim}")
                try:
                    idents.append(signing.unseal(blob, self.cfg.token))
                except signing.BadSignature:
                    who = signing.unseal(blob, None, verify=False)
                    rejected[f"{r}/{claim}"] = (f"node {who.get('host')} ({who.get('addr')}, rank {r}) signed its facts "
                                                f"with a different token; fix: pass the same --token / DDPDOCTOR_TOKEN "
                                                f"on every node")
                claim += 1
        if missing:
            known = [f"{i['host']} ({i['addr']}) rank {i['rank']}" for i in idents]
            msg = (f"{len(present)}/{n} nodes joined {self.cfg.master} within {self.cfg.timeout:g} s; missing "
                   f"rank(s) {_ranks(missing)}. Joined: {', '.join(known) or 'none'}. Fix: start ddpdoctor preflight "
                   f"on the missing node(s) with --master {self.cfg.master} --nnodes {n}, and check they can reach "
                   f"this address")
            if any(i["claim"] > 1 for i in idents):
                dups = sorted({i["rank"] for i in idents if i["claim"] > 1})
                msg += f"; rank(s) {_ranks(dups)} were claimed by more than one node (give each node its own --node-rank)"
            self._set("roster", {"status": "aborted", "message": msg, "missing": missing})
            self._linger_for_readers(time.monotonic() + 2.0)
            raise ClusterNotAssembled(msg)
        _names(idents)
        master = next(i for i in idents if i["rank"] == 0 and i["claim"] == 1)
        return {"status": "ok", "nodes": idents, "master": master["name"], "rejected": rejected}

    def _view(self, roster: dict) -> ClusterView:
        nodes = sorted(roster["nodes"], key=lambda i: (i["rank"], i["claim"]))
        master = next(n for n in nodes if n["name"] == roster["master"])
        nonce = roster.get("shared_nonce")
        return ClusterView(
            me=self.me, nodes=nodes, master=master, endpoint=str(self.cfg.master), timeout=self.cfg.timeout,
            shared_dir=self.cfg.shared_dir, shared_nonce=nonce, code_dir=self.cfg.code_dir, store=self.store,
            world_rank=[n["name"] for n in nodes].index(self.me["name"]),
        )

    def _phases(self, is_master: bool, roster: dict, local_box: dict) -> dict:
        from ..preflight import gather_phase

        view = self._view(roster)
        name = self.me["name"]
        self.progress.say(f"all {len(view.nodes)} nodes joined as {name}; testing links")
        local_facts, local_gather = local_box.get("facts", {}), local_box.get("gather", {})
        if not local_box:
            local_gather = {lc.name: {"status": runner.TIMEOUT, "message": "local checks did not finish in time"}
                            for lc in self.plan.phase("local")}
        if is_master and self.cfg.shared_dir:
            self._write_shared_nonce(view)
        elif self.cfg.shared_dir:
            self._wait_key("shared-nonce", self.deadline + self.cfg.timeout, "the shared-dir nonce")
            if self._has("shared-nonce"):
                view.shared_nonce = self._get("shared-nonce")["nonce"]
        facts, gather = gather_phase(self.plan, "cluster", name, rank=self.rank, nnodes=self.cfg.nnodes, cluster=view)
        facts.update(local_facts)
        gather.update(local_gather)
        self._set(f"facts/{name}", {"facts": facts, "gather": gather})
        self._mark("facts_published_s")

        phase_deadline = time.monotonic() + self.cfg.timeout
        if is_master:
            all_nodes, dead = self._collect("facts", view, phase_deadline)
            go, reason = self._collective_go(all_nodes, dead)
            self._set("collective-go", {"go": go, "reason": reason})
        elif not self._wait_key("collective-go", phase_deadline + GRACE_S, "the master's go for the collective test"):
            raise ClusterNotAssembled(f"the master {self.cfg.master} went silent during the link tests")
        go = self._get("collective-go")
        if go["go"] and self.plan.phase("collective"):
            self.progress.say("links passed; running the collective smoke test")
            cfacts, cgather = gather_phase(self.plan, "collective", name, rank=self.rank, nnodes=self.cfg.nnodes,
                                           cluster=view)
        else:
            reason = go.get("reason") or "no collective checks selected"
            cfacts = {}
            cgather = {lc.name: {"status": runner.SKIPPED, "message": f"collective test not run: {reason}"}
                       for lc in self.plan.phase("collective")}
        self._set(f"cfacts/{name}", {"facts": cfacts, "gather": cgather})

        # A collective gather may legitimately run up to its own time limit (a process group failing to
        # connect takes its full timeout): wait that long for the others' results, not only --timeout.
        collective_s = max((lc.check.timeout_s for lc in self.plan.phase("collective")), default=0.0) if go["go"] else 0.0
        verdict_deadline = time.monotonic() + max(self.cfg.timeout, collective_s + GRACE_S)
        if is_master:
            cnodes, cdead = self._collect("cfacts", view, verdict_deadline)
            doc = self._verdict(view, all_nodes, dead, cnodes, cdead)
            self._set("verdict", {k: doc[k] for k in ("results", "verdict", "exit_code", "advice", "scope")}
                      | {"nodes": {n: {k: v for k, v in d.items() if k != "facts" and k != "gather"}
                                   for n, d in doc["nodes"].items()}})
            self.store.add("done", 1)
            self._linger_for_readers(time.monotonic() + 5.0, want=len(view.nodes))
            return doc
        if not self._wait_key("verdict", verdict_deadline + GRACE_S, "the verdict"):
            raise ClusterNotAssembled(f"the master {self.cfg.master} never published a verdict")
        verdict = self._get("verdict")
        try:
            self.store.add("done", 1)
        except Exception:  # noqa: BLE001 - the master may already be gone; the verdict is what mattered
            pass
        return model.envelope("preflight", scope="cluster", run=self._run_settings(), verdict=verdict["verdict"],
                              exit_code=verdict["exit_code"], checks=[lc.describe() for lc in self.plan.checks],
                              nodes=verdict["nodes"], results=verdict["results"], advice=verdict.get("advice", []),
                              timings=self.timings, this_node=name)

    def _write_shared_nonce(self, view: ClusterView) -> None:
        nonce = secrets.token_hex(16)
        path = Path(self.cfg.shared_dir) / f".ddpdoctor-shared-{nonce[:8]}"
        try:
            path.write_text(nonce)
        except OSError as exc:
            nonce = f"unwritable: {exc}"
        view.shared_nonce = nonce
        view.extra["shared_file"] = str(path)
        self._set("shared-nonce", {"nonce": nonce, "file": path.name})

    def _collect(self, what: str, view: ClusterView, until: float) -> tuple[dict, dict]:
        """Every node's published facts; a node that is silent and whose probe refuses is dead, named at once."""
        got: dict[str, dict] = {}
        dead: dict[str, str] = {}
        waiting = {n["name"]: n for n in view.nodes}
        last_liveness = 0.0
        while waiting:
            for nm in list(waiting):
                if self._has(f"{what}/{nm}"):
                    got[nm] = self._get(f"{what}/{nm}")
                    del waiting[nm]
            if not waiting:
                break
            now = time.monotonic()
            if now >= until:
                for nm in waiting:
                    dead[nm] = f"sent no {what} within {max(0.0, until - self.start):.0f} s of the start"
                break
            if now - last_liveness > 1.0:  # a killed node's probe listener refuses: no need to wait it out
                last_liveness = now
                for nm, node in list(waiting.items()):
                    res = ep.ping(node["addr"], node["probe_port"], 1.0)
                    if not res.ok and res.error_class == ep.REFUSED:
                        dead[nm] = "stopped answering mid-preflight (its probe listener is gone: process killed?)"
                        del waiting[nm]
                self.progress.say(f"waiting for {what} from {', '.join(sorted(waiting)) or '-'}", dedupe=True)
            time.sleep(POLL_S)
        return got, dead

    def _collective_go(self, nodes: dict, dead: dict) -> tuple[bool, str]:
        if dead:
            return False, f"node(s) {', '.join(sorted(dead))} stopped answering"
        for nm, data in nodes.items():
            for probe in (data["facts"].get("mesh") or {}).get("probes", []):
                if not probe.get("ok"):
                    return False, f"link {nm} -> {probe.get('peer')} failed ({probe.get('error_class')})"
        return True, ""

    def _verdict(self, view: ClusterView, nodes: dict, dead: dict, cnodes: dict, cdead: dict) -> dict:
        merged: dict[str, dict] = {}
        for n in view.nodes:
            nm = n["name"]
            entry = {"rank": n["rank"], "host": n["host"], "addr": n["addr"], "fqdn": n.get("fqdn"),
                     "facts": {}, "gather": {}}
            for part in (nodes.get(nm), cnodes.get(nm)):
                if part:
                    entry["facts"].update(part["facts"])
                    entry["gather"].update(part["gather"])
            merged[nm] = entry
        results = runner.compare_all(self.plan.checks, merged, self.plan.opts_by_check, run=self._run_settings())
        for nm, why in sorted({**cdead, **dead}.items()):
            results.append(Result(
                check="cluster", level=Level.FAIL, summary=f"node {nm} {why}", nodes=[nm],
                actual=why, expected="every node reports until the verdict",
                fix=f"look at node {nm}: was ddpdoctor killed (OOM, scheduler, Ctrl-C)? rerun the preflight there",
            ))
        roster_rejects = (self._get("roster") or {}).get("rejected", {})
        for key, why in sorted(roster_rejects.items()):
            results.append(Result(check="cluster", level=Level.FAIL, summary=f"rank {key.split('/')[0]} rejected: {why}",
                                  nodes=[], actual="wrong token", expected="the cluster's token",
                                  fix="pass the same --token (or DDPDOCTOR_TOKEN) on every node"))
        from .advice import advice_lines

        advice = advice_lines(merged, view, self.cfg, results)
        return model.preflight_doc(scope="cluster", nodes=merged, checks=[lc.describe() for lc in self.plan.checks],
                                   results=results, run=self._run_settings(), timings=self.timings) | {"advice": advice}

    def _run_settings(self) -> dict:
        run = {k: v for k, v in self.plan.run.items() if v is not None}
        run.update(nnodes=self.cfg.nnodes, master=str(self.cfg.master), nproc_per_node=self.cfg.nproc_per_node,
                   shared_dir=self.cfg.shared_dir, code_dir=self.cfg.code_dir, timeout=self.cfg.timeout)
        return {k: v for k, v in run.items() if v is not None}

    def _linger_for_readers(self, until: float, want: int | None = None) -> None:
        """The master hosts the store: stay until the other nodes have read the last word (bounded)."""
        while time.monotonic() < until:
            try:
                if want is not None and int(self.store.add("done", 0)) >= want:
                    return
            except Exception:  # noqa: BLE001
                return
            time.sleep(POLL_S)

    def _close(self) -> None:
        if self.probe is not None:
            self.probe.close()
        self.store = None
        self.server_store = None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
