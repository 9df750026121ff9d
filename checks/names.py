"""names: interface choice and name resolution across nodes: which interface routes to the master and peers,
whether *_SOCKET_IFNAME agree with it, equal MTUs, hostnames that resolve to loopback or to addresses
peers cannot reach, and how long forward/reverse lookups of every node take (torch's store resolves
peers' names as they connect: a slow resolver stalls every rendezvous)."""
from __future__ import annotations

import os
import socket
import threading
from shlex import quote

from ddpdoctor.api import LOOKUP_CAP_S, Check, Option, is_loopback, lookup, odd_ones, per_node, route_source_addr

from .support.ifnames import gloo_ifname_problem, iface_of_addr, nccl_ifname_matches


class NamesCheck(Check):
    name = "names"
    description = "Interface to master/peers, *_SOCKET_IFNAME agreement, MTU parity, hostname resolution and lookup latency"
    phase = "cluster"
    cross_node = True  # a job's prologs meet for it (unattended/meet.py)
    options = {"slow_lookup_s": Option(1.0, "a forward or reverse lookup slower than this is a warning")}
    timeout_s = 40.0

    def gather(self, ctx) -> dict:
        view = ctx.cluster
        me = view.me
        # The master reaches itself through the address it advertises; the others through their route to it.
        is_master = view.master["name"] == me["name"]
        route = iface_of_addr(me["addr"] if is_master else route_source_addr(view.master["addr"]))
        peer_ifaces: dict[str, int] = {}
        for peer in view.peers_to_probe():
            info = iface_of_addr(route_source_addr(peer["addr"]))
            key = (info or {}).get("iface") or "?"
            peer_ifaces[key] = peer_ifaces.get(key, 0) + 1
        hostname = socket.gethostname()
        own = lookup("forward", hostname)
        unique_hosts = len({n["host"] for n in view.nodes}) == len(view.nodes)
        jobs = []
        # The same peers the mesh probes (all of them up to 64 nodes, ring + random beyond) plus the master:
        # every node resolving every other one would be N^2 queries against one DNS server.
        sample = {n["name"]: n for n in [*view.peers_to_probe(), view.master, me]}
        for node in sample.values():
            jobs.append(("reverse", node["addr"], node["name"]))
            if unique_hosts:
                jobs.append(("forward", node["host"], node["name"]))
        results: list[dict] = []
        lock = threading.Lock()

        def run(job):
            kind, query, who = job
            res = lookup(kind, query)
            res["node"] = who
            with lock:
                results.append(res)

        # All lookups at once, as a rendezvous does: that is when a slow resolver shows (see c10d-dns-stall).
        threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in jobs[:512]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(LOOKUP_CAP_S + 1)  # lookup() returns by then: its own thread is the one abandoned
        return {
            "hostname": hostname, "fqdn": socket.getfqdn(), "hostname_lookup": own,
            "advertised": me["addr"], "route_to_master": route, "routes_to_peers": peer_ifaces,
            "ifname_env": {k: os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")},
            "unique_hostnames": unique_hosts, "lookups": sorted(results, key=lambda r: (r["kind"], r["query"])),
        }  # the peers' addresses are their own facts' "advertised": a copy of all here grew with the square of N

    def exports(self, facts: dict) -> dict:
        route = facts.get("route_to_master")
        if not isinstance(route, dict) or not route.get("iface"):
            return {}
        return {"interface": {"name": route.get("iface"), "addr": route.get("addr"), "mtu": route.get("mtu")}}

    def compare(self, facts_by_node, opts):
        advertised = {n: f.get("advertised") for n, f in facts_by_node.items() if isinstance(f, dict)}
        out = per_node(facts_by_node, lambda n, f: self._judge_node(n, f, opts["slow_lookup_s"], advertised))
        out += self._slow_lookups(facts_by_node, opts["slow_lookup_s"])
        routes = {n: f.get("route_to_master") or {} for n, f in facts_by_node.items()}
        return out + odd_ones({n: r.get("mtu") for n, r in routes.items()}, lambda node, mtu, common: self.fail(
            f"MTU {mtu} on {node}'s interface differs from {common} on the others", [node], actual=mtu,
            expected=common, fix=f"make the MTU identical end to end, e.g. on {node}: "
                                 f"ip link set dev {quote(str(routes[node].get('iface')))} mtu {quote(str(common))}"),
            tie=lambda s: [self.fail(
                f"the MTU of the interfaces to the master differs with no majority: {s.sides_text(str)}",
                list(s.odd), actual={n: s.value_of(n) for n in s.odd}, expected="one MTU end to end",
                fix="make the MTU identical end to end (`ip link set dev IFACE mtu N` on the nodes that differ, and "
                    "the switches between them): no value is on more nodes than another, so pick the one the network "
                    "carries")])

    def _slow_lookups(self, facts_by_node, slow):
        """One warning per kind of lookup (forward, reverse) slower than ``slow`` anywhere, with the pairs it
        covers (who asked, about whom, how long): one per pair was 883 of a 32-node run's 1,379 results."""
        pairs: dict[str, list] = {}
        asked: dict[str, int] = {}
        for node, f in sorted(facts_by_node.items()):
            for lk in (f.get("lookups") or []) if isinstance(f, dict) else []:
                asked[lk.get("kind")] = asked.get(lk.get("kind"), 0) + 1
                secs = lk.get("seconds") or 0.0
                if secs > slow:
                    pairs.setdefault(lk.get("kind"), []).append([node, lk.get("query"), round(secs, 2)])
        out = []
        for kind, found in sorted(pairs.items()):
            worst = max(found, key=lambda p: p[2])
            nodes = sorted({p[0] for p in found})
            where = f"from {nodes[0]}" if len(nodes) == 1 else f"from {len(nodes)} nodes"
            what = f"{kind} lookup of {worst[1]} {where} took {worst[2]:.2f} s" if len(found) == 1 else \
                f"{len(found)} of {asked[kind]} {kind} lookups {where} took over {slow:g} s (up to {worst[2]:.2f} s)"
            out.append(self.warn(what, nodes, actual=worst[2], expected=f"<= {slow:g} s",
                                 details={"pairs": found, "columns": ["from", "query", "seconds"]},
                                 fix="a slow resolver stalls torch's store (it resolves peers as they connect): add "
                                     "all nodes to /etc/hosts, or fix the DNS server / nscd"))
        return out

    def _judge_node(self, node, f, slow, advertised):
        route = f.get("route_to_master") or {}
        iface = route.get("iface")
        env = f.get("ifname_env") or {}
        if iface:
            for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
                value = env.get(var)
                if not value:
                    continue
                ok = nccl_ifname_matches(value, iface) if var == "NCCL_SOCKET_IFNAME" else value == iface
                problem = gloo_ifname_problem(value) if var == "GLOO_SOCKET_IFNAME" else None
                if problem or not ok:
                    yield self.fail(f"{var}={value} on {node} does not select {iface}, the interface that reaches "
                                    f"the master", [node], actual=value, expected=iface,
                                    fix=f"export {var}={quote(('=' if var.startswith('NCCL') else '') + str(iface))}  # on {node}")
            yield self.passed(f"{node} reaches the master through {iface} (mtu {route.get('mtu')})", [node], actual=route)
        others = {k: v for k, v in (f.get("routes_to_peers") or {}).items() if k != iface}
        if others and iface:  # no interface known for the master: nothing to hold the peers' routes against
            yield self.warn(f"{node} reaches some peers through {', '.join(others)}, the master through {iface}",
                            [node], actual=f.get("routes_to_peers"), expected=f"all through {iface}",
                            fix="pin one interface on every node: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME")
        own = f.get("hostname_lookup") or {}
        addrs = own.get("answer") or []
        adv = f.get("advertised")
        if own.get("error"):
            yield self.fail(f"{node}'s hostname {f.get('hostname')!r} does not resolve: {own['error']}", [node],
                            actual=own["error"], expected="the node's routable address",
                            fix=f"add {quote(str(adv) + ' ' + str(f.get('hostname')))} to /etc/hosts on every node (or fix DNS)")
        elif addrs and all(is_loopback(a) for a in addrs) and adv and not is_loopback(adv):
            # With GLOO_SOCKET_IFNAME on the right interface gloo no longer asks the hostname; torchrun's
            # c10d agent still advertises it unless given --local-addr, hence a warning rather than a pass.
            pinned = iface is not None and env.get("GLOO_SOCKET_IFNAME") == iface
            yield (self.warn if pinned else self.fail)(f"{node}'s hostname {f.get('hostname')!r} resolves to loopback {', '.join(addrs)}",
                            [node], actual=addrs, expected=adv,
                            fix=f"in /etc/hosts on {node}, map {quote(str(f.get('hostname')))} to {quote(str(adv))} instead of "
                                f"{quote(str(addrs[0]))}; or export GLOO_SOCKET_IFNAME={quote(str(iface)) if iface else '<iface>'} "
                                f"and launch with torchrun --local-addr {quote(str(adv))}")
        elif f.get("unique_hostnames") and addrs and adv and adv not in addrs and not is_loopback(adv):
            yield self.warn(f"{node}'s hostname resolves to {', '.join(addrs)}, but peers reach it at {adv}", [node],
                            actual=addrs, expected=adv,
                            fix=f"make {quote(str(f.get('hostname')))} resolve to {quote(str(adv))} on every node (torchrun's c10d "
                                "advertises the hostname)")
        for lk in f.get("lookups") or []:  # the slow ones: _slow_lookups, one finding for all of them
            if (lk.get("seconds") or 0.0) > slow:
                continue
            if lk["kind"] == "forward" and lk.get("answer") and f.get("unique_hostnames"):
                # a document of an earlier version kept every peer's address in each node's facts
                peer_addr = (f.get("peer_addrs") or {}).get(lk.get("node")) or advertised.get(lk.get("node"))
                if peer_addr and peer_addr not in lk["answer"] and not is_loopback(peer_addr):
                    yield self.warn(f"{node} resolves {lk['query']} to {', '.join(lk['answer'])}, but that node is "
                                    f"at {peer_addr}", [node, lk.get("node")], actual=lk["answer"], expected=peer_addr,
                                    fix=f"make {quote(str(lk['query']))} resolve to {quote(str(peer_addr))} on every node (/etc/hosts "
                                        "or DNS)")
