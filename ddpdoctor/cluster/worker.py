"""A worker (any node but rank 0): reaches the master, finds the run's hello and key, joins, answers the
exchange, and takes the master's verdict once it verifies."""
from __future__ import annotations

import time
from typing import Callable

from ..errors import ClusterNotAssembled, UsageError
from . import endpoint as ep
from . import exchange as exchanges
from . import keyfile
from . import verdict as verdicts
from .budget import GRACE_S, poll_delays
from .envelope import key_id, open_envelope
from .mailbox import StoreGone, StoreSilent
from .messages import Finding, Invalid, Slot, about, key_of
from .node import KEYLESS_FIX, TOKEN_FIX, Node
from .view import ClusterView

TOKEN_PATIENCE_S = 3.0  # how long a node waits for a valid hello beside one signed with another token


class _KeySearch:
    """Where a node without --token stands in finding the run's key file (see Worker._hello_without_token)."""

    def __init__(self) -> None:
        self.searched = False
        self.unmatched = None  # a key file of this run's scope that no hello verified with
        self.since = 0.0  # when it was found


class Worker(Node):
    """Any node but rank 0: reaches the master, joins, and takes the master's verdict once it verifies."""

    def connect(self) -> None:
        cfg = self.cfg

        said = [0.0]  # when the last "not answering yet" line was shown

        def tick(attempt: int, result: ep.PingResult, left: float) -> None:
            if not result.ok and (attempt == 1 or time.monotonic() - said[0] >= 2.0):
                said[0] = time.monotonic()
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
        keys = _KeySearch()
        delays = poll_delays(self.cfg.nnodes)
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
                hello = self._hello_without_token(hellos, keys, until)
                if hello is not None:
                    return hello
            if time.monotonic() >= until:
                refused = [f for f in self.mb.findings if f.key == "hello"]
                why = (f"; the only message(s) there were invalid: {refused[-1].why} — is --token the same on every "
                       f"node?") if refused else ""
                raise ClusterNotAssembled(f"the master {self.cfg.master} never sent its hello within "
                                          f"{self.budget.elapsed():.0f} s{why}")
            time.sleep(next(delays))

    def _hello_without_token(self, hellos: list, keys: "_KeySearch", until: float) -> dict | None:
        """No --token: this run's key file when a hello verifies with it (looked for up to KEY_WAIT_S when the
        hello says there is one, once otherwise). A key file of this run's scope that no hello verifies with
        means the master's hello was replaced (an outsider who can `set` a store key, or a stale file): this
        node keeps looking for KEY_WAIT_S (a network filesystem may show the new file late) and then stops,
        never following an unverifiable master (it would take a forger's roster and verdict). No key file anywhere: the first hello, unauthenticated (said)."""
        keyed = [(f, b) for f, b in hellos if b.get("key_id")]
        paths = keyfile.candidates(keyfile.scope(str(self.cfg.master), self.cfg.rdzv_id, self.cfg.nnodes),
                                   self.cfg.shared_dir)
        # looked for a while when the hello says there is a key and it may yet appear (a network filesystem);
        # not in a folder this user may not enter: the master refuses a keyless node, the sooner it claims the
        # sooner it is told why
        wait = keyfile.KEY_WAIT_S if keyed and not keys.searched and keyfile.may_appear(paths) else 0.0
        keys.searched = True
        key, path = keyfile.find(paths, lambda k: any(self._this_runs_key(k, f, b) for f, b in keyed),
                                 min(until, time.monotonic() + wait))
        if key is not None:
            self.mb.token, self.mb.sealed, self.key_path = key, True, path
            return self._newest([b for f, b in keyed if self._this_runs_key(key, f, b)])
        if keys.unmatched is None:
            keys.unmatched = next((p for p in paths if keyfile.read(p) is not None), None)
            keys.since = time.monotonic()
        if keys.unmatched is None:
            self.mb.blind = bool(keyed)  # the master signs with a key this node does not have
            return hellos[0][1]
        if time.monotonic() >= min(until, keys.since + keyfile.KEY_WAIT_S):  # a network filesystem's lag at most
            raise ClusterNotAssembled(
                f"the hello at {self.cfg.master} does not verify with this run's key file {keys.unmatched}: "
                f"something replaced the master's hello in its store (anyone who reaches the port can), or the "
                f"file is left from an earlier run whose master was killed; this node does not follow a master "
                f"it cannot verify. Fix: if no other preflight uses {self.cfg.master}, remove that file and "
                f"rerun; {TOKEN_FIX}")
        return None

    @staticmethod
    def _why_not(frame: bytes, secret: str) -> str | None:
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
        delays = poll_delays(self.cfg.nnodes)
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
            time.sleep(next(delays))

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
            raise ClusterNotAssembled(self._refused_why(roster["message"]))
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

    def _refused_why(self, message: str) -> str:
        """The master's reason the run did not assemble, led by this node's own when it had no key while the
        master signs with one: the master then names this node's rank missing ("missing rank(s) 1"), which
        alone tells the node nothing about why it was not taken."""
        if not self.mb.blind:
            return message
        paths = keyfile.candidates(keyfile.scope(str(self.cfg.master), self.cfg.rdzv_id, self.cfg.nnodes),
                                   self.cfg.shared_dir)
        looked = "; ".join(f"{p}: {keyfile.unusable(p)}" for p in paths) or "no home directory to look in"
        return (f"this node (rank {self.mb.me.rank}) was not taken: the master signs this run with its key file and "
                f"takes only nodes that prove it, and this node could not read the key ({looked}); "
                f"{KEYLESS_FIX}. The master said: {message.replace(KEYLESS_FIX + '. ', '')}")

    def exchange(self, view: ClusterView) -> None:
        if not exchanges.publishers(self.plan):
            return
        try:
            until = min(time.monotonic() + self.cfg.timeout, self.budget.verdict_by - 3 * GRACE_S)
            view.published = self.wait_for("exchange", until, about(key_of("exchange")))["values"]
        except ClusterNotAssembled:
            view.published = {}  # each publishing check's gather says the master's value never came

    def go_ahead(self, view: ClusterView) -> dict:
        return self.wait_for("go", self.budget.verdict_by - GRACE_S, about(key_of("go")))

    def verdict(self, view: ClusterView) -> dict:
        body = self.wait_for("verdict", self.budget.end, "the verdict")
        try:
            self.mb.post("done", {"done": True})
        except (StoreGone, StoreSilent):
            pass  # the master may already be gone; the verdict is what mattered
        self.timings["verdict_s"] = round(self.budget.elapsed(), 3)
        open_nodes = {n["name"] for n in view.nodes if Slot(n["rank"], n["claim"]) in self.mb.open_slots}
        if self.mb.blind:  # the roster lists this node's slot too: each node once
            open_nodes.add(self.me["name"])
        auth = self.auth_state(sorted(open_nodes))

        def advice(results):
            from .advice import advice_lines

            return advice_lines(body["nodes"], view, self.cfg, results)

        doc = verdicts.worker_document(self.plan, self.run_settings(), body, self.timings, self.me["name"],
                                       self.mb.findings, auth=auth, advice_fn=advice,
                                       verified=self.auth_mode() != "none")  # the master's signature checked
        # the master's results come first; what follows only this node saw (messages it refused)
        return doc | {"master": {**(body.get("master") or {}), "results": len(body["results"])}}
