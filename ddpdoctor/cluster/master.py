"""The master (node rank 0): hosts the store (unless torchrun's agent does), builds the roster, runs the
exchange's publishes, decides whether the collective runs, and decides and posts the verdict."""
from __future__ import annotations

import secrets
import time

from .. import exports
from ..errors import ClusterNotAssembled
from . import exchange as exchanges
from . import keyfile
from . import roster as rosters
from . import verdict as verdicts
from .budget import GRACE_S, poll_delays
from .liveness import Heartbeats, dead_or_silent
from .envelope import key_id
from .mailbox import StoreGone, StoreSilent, bounded
from .messages import MAX_CLAIMS, Slot, key_of
from .node import KEYLESS_FIX, Node
from .view import ClusterView

# What the master collects from every node, in a user's words (progress lines and silent nodes' findings).
COLLECTED = {"facts": "check results", "cfacts": "collective test results"}
OPEN_GRACE_S = 3.0  # with --allow-unauthenticated: a rank held only by a node without the key waits this long



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
        delays = poll_delays(n)
        while True:
            self._read_idents(valid, read)
            # a keyed run takes only nodes that prove the key: an unsigned claim holds no rank (issue 33)
            missing = [r for r in range(n) if r not in valid or r in self._refused_ranks(valid)]
            if not missing and self._open_ranks(valid):  # held only by nodes without the key: one may come
                all_in_since = all_in_since or time.monotonic()
                if time.monotonic() - all_in_since < OPEN_GRACE_S and time.monotonic() < self.budget.meet_by:
                    time.sleep(next(delays))
                    continue
            if not missing or time.monotonic() >= self.budget.meet_by:
                break
            self.mb.keep_hello()
            self.progress.say(f"{n - len(missing)}/{n} nodes joined{_who_joined(valid, missing)}; waiting for rank(s) "
                              f"{rosters.ranks_text(missing[:20])}" + (" ..." if len(missing) > 20 else ""), dedupe=True)
            time.sleep(next(delays))
        self._read_idents(valid, read)  # late claims of ranks already present (duplicates) are named too
        self._valid, self._read = valid, read  # read again at the verdict: a claim after the roster is named
        self._prefer_keyed(valid)
        keyless = self._refuse_keyless(valid)
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
            self._abort_meet(valid, missing, idents, keyless)
        open_slots = [(i["rank"], i["claim"]) for i in idents if not i.pop("_keyed", True)]
        self.mb.open_slots = {Slot(*s) for s in open_slots}
        roster = rosters.accepted(idents, self.rejected)
        roster["auth"] = {"mode": self.auth_mode(), "open": [list(s) for s in open_slots]}
        self.mb.post("roster", roster)
        return roster

    def _abort_meet(self, valid: dict, missing: list[int], idents: list[dict], keyless: list[str]) -> None:
        """The run does not assemble: every node is told why (the aborted roster), then this one stops. Nodes
        refused for having no key come first: "missing rank(s) 1" alone reads as a node that never started."""
        msg = rosters.missing_message(present=sorted(valid), missing=missing, idents=idents,
                                      endpoint=str(self.cfg.master), nnodes=self.cfg.nnodes, timeout=self.cfg.timeout,
                                      hosts=self.cfg.hosts, launcher=self.cfg.launcher, command=self.cfg.node_command)
        others = sorted(set(self.rejected.values()) - set(keyless))
        if others:
            msg += f"; rejected: {'; '.join(others[:3])}"
        if keyless:
            msg = f"not taken: {'; '.join(sorted(keyless)[:3])}; {KEYLESS_FIX}. {msg}"
        self.mb.post("roster", rosters.aborted(msg), public_copy=self.mb.sealed and not self.cfg.token)
        self._linger(time.monotonic() + 2.0)
        raise ClusterNotAssembled(msg)

    def keyed_only(self) -> bool:
        """This master has the run's key file and was not told to accept nodes without it: an identity under the
        public names (unsigned: anyone who reaches the port can write one) holds no rank. (With --token such an
        identity never verifies; without any key there is nothing to prove.)"""
        return self.mb.sealed and not self.cfg.token and not self.cfg.allow_unauthenticated

    def _refused_ranks(self, valid: dict[int, list[dict]]) -> set[int]:
        """Ranks held only by unsigned identities, in a run that takes only keyed nodes: still missing."""
        if not self.keyed_only():
            return set()
        return {r for r, idents in valid.items() if not any(i.get("_keyed") for i in idents)}

    def _refuse_keyless(self, valid: dict[int, list[dict]]) -> list[str]:
        """At the roster, in a run that takes only keyed nodes: every identity without the key is named as
        rejected, never taken; its rank is missing unless a node with the key holds it. The reasons, one per
        identity refused ([] when none was)."""
        if not self.keyed_only():
            return []
        found = []
        for r in sorted(valid):
            for i in [i for i in valid[r] if not i.get("_keyed")]:
                why = (f"rank {r} was claimed without the run's key by {i.get('host')} ({i.get('addr')}): this run "
                       f"has a key and accepts only nodes that prove it")
                self.rejected[f"ident/{r}/{i['claim']}"] = why
                found.append(why)
            valid[r] = [i for i in valid[r] if i.get("_keyed")]
            if not valid[r]:
                del valid[r]
        return found

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

    def exchange(self, view: ClusterView) -> None:
        """Publish what this run's checks publish; posted even when empty, so a node whose plan has a publishing
        check the master's lacks (--skip on the master only) is not kept waiting."""
        deadline = min(time.monotonic() + self.cfg.timeout, self.budget.verdict_by - 3 * GRACE_S)
        view.published = exchanges.publish_all(self.plan, view, rank=self.rank, nnodes=self.cfg.nnodes,
                                               deadline=deadline)
        self.mb.post("exchange", {"values": view.published})

    def go_ahead(self, view: ClusterView) -> dict:
        """Collect every node's facts, re-check liveness, decide whether the collective runs, and say so."""
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
            for link in exports.exported(data, "links") or []:  # the links any check probed (mesh's, a plugin's)
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

        open_names = [n["name"] for n in view.nodes if Slot(n["rank"], n["claim"]) in self.mb.open_slots]
        others = [n for n in view.nodes if n["name"] != self.me["name"]]
        auth = self.auth_state(open_names)
        # not authenticated: no fix built from what came over the network, on this node either
        withhold_why = None if auth["authenticated"] or not others else verdicts.WITHHELD_OPEN
        doc = verdicts.decide(self.plan, self.run_settings(), view, merged, unverified(self.silent, open_names, others),
                              self.mb.findings, self.timings, advice, extra=self._late_claims(view),
                              withhold_why=withhold_why, me=self.me["name"])
        # where the full summary and the cluster result are: the other nodes print one line pointing here
        where = {"node": self.me["name"], "host": self.me["host"], "output_dir": self.plan.run.get("output_dir")}
        doc.update(this_node=self.me["name"], role="master", master=where, auth=auth)
        self.mb.post("verdict", verdicts.published(doc) | {"master": where})
        readers = [n for n in view.nodes if n["name"] not in self.silent and n["name"] != self.me["name"]]
        self._linger(min(time.monotonic() + 5.0, self.budget.end), readers=readers)
        self.run_cleanups()
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
        delays = poll_delays(len(view.nodes))
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
                if not waiting:  # the rest died or fell silent: named in the verdict, not waited for
                    break
                names = ", ".join(sorted(waiting)[:10]) + (f" (+{len(waiting) - 10} more)" if len(waiting) > 10 else "")
                self.progress.say(f"waiting for the {COLLECTED[kind]} of {names}", dedupe=True)
            time.sleep(next(delays))
        return got

    def note_silent(self, name: str, why: str) -> None:
        self.silent.setdefault(name, why)

    def _check_liveness(self, view: ClusterView, only: set[str] | None = None) -> None:
        """Dead: its probe listener refuses (the process is gone). Silent: its heartbeat stopped moving."""
        if self.heartbeats is None:
            self.heartbeats = Heartbeats(view.nodes)
        watched = [n for n in view.nodes if n["name"] != self.me["name"] and n["name"] not in self.silent
                   and (only is None or n["name"] in only)]
        self.silent.update(dead_or_silent(self.mb, self.heartbeats, watched))

    def _linger(self, until: float, readers: list[dict] | None = None) -> None:
        """The master hosts the store: stay until each reader's sealed "done" says it has the last word
        (bounded; without readers, the whole time)."""
        pending = {self.mb.name(key_of("done", Slot(n["rank"], n["claim"])),
                                self.mb._sealed_for(Slot(n["rank"], n["claim"]))): Slot(n["rank"], n["claim"])
                   for n in readers or []}
        delays = poll_delays(len(readers or []) + 1)
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
            time.sleep(next(delays))


def unverified(silent: dict[str, str], open_names: list[str], others: list[dict]) -> dict[str, str]:
    """Why each silent node stopped answering, said with care for a node that joined without the run's key
    while other nodes had it: anyone who reaches the port can claim a rank under any host name, so its silence
    may be an impostor's, not the named node's. When no node but the master had the key (no shared home: the
    usual case), that is how every node joined, and a node that went silent is simply named."""
    if len(open_names) >= len(others):
        return dict(silent)
    return {nm: why + ("; it joined without the run's key, so this may be an impostor using its name: set "
                       "DDPDOCTOR_TOKEN on every node and rerun" if nm in open_names else "")
            for nm, why in silent.items()}


SHOWN_JOINED = 8  # nodes named in the "joined" line; more are counted


def _who_joined(valid: dict[int, list[dict]], missing: list[int]) -> str:
    """': rank 0 vm (10.0.0.1), rank 1 gpu2 (10.0.0.2)' for the nodes in so far (their own claims, as read)."""
    joined = [(r, idents[-1]) for r, idents in sorted(valid.items()) if r not in missing and idents]
    if not joined:
        return ""
    named = ", ".join(f"rank {r} {ident.get('host')} ({ident.get('addr')})" for r, ident in joined[:SHOWN_JOINED])
    return f": {named}" + (f" and {len(joined) - SHOWN_JOINED} more" if len(joined) > SHOWN_JOINED else "")
