"""mesh: every node connects to every peer's probe listener (TCP), so a firewall between two nodes is named.

Up to 64 nodes all pairs are probed; above, ring neighbours plus k random peers (see ClusterContext.peers_to_probe in ddpdoctor.api).
A failed link is reported as the directed pair (a -> b) with its class: refused, timed out, unreachable.
"""
from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor

from ddpdoctor.api import Check, Option, connect_fix, connect_probe, per_node

PORTS_NOTE = ("NCCL and gloo open connections on ephemeral ports between every pair of nodes, not only to the "
              "master port: allow all TCP between job nodes")


class MeshCheck(Check):
    name = "mesh"
    facts_shape = {"probes": [{"peer": "text", "error_class": "scalar"}]}
    description = "TCP reachability between every pair of nodes (directed), with round-trip times"
    phase = "cluster"
    cross_node = True  # a job's prologs meet for it (unattended/meet.py)
    options = {
        "connect_timeout_s": Option(3.0, "seconds one TCP connect may take before it counts as timed out"),
        "warn_rtt_ms": Option(50.0, "a link round trip above this many ms is a warning"),
    }

    def gather(self, ctx) -> dict:
        view = ctx.cluster
        timeout = ctx.opts["connect_timeout_s"]
        peers = view.peers_to_probe()

        def probe(peer: dict) -> dict:
            # A slow first round trip gets two more tries, best kept: one busy moment on either host must not
            # read as a slow link. A fast one is final, so a large mesh costs one connect per link.
            res = connect_probe(peer["addr"], peer["probe_port"], timeout, source=view.me["addr"], payload=b"P\n")
            slow = ctx.opts["warn_rtt_ms"] / 2
            for _ in range(2 if res.ok and (res.rtt_ms or 0.0) > slow else 0):
                again = connect_probe(peer["addr"], peer["probe_port"], timeout, source=view.me["addr"],
                                      payload=b"P\n")
                if again.ok and again.rtt_ms < res.rtt_ms:
                    res = again
            return {"peer": peer["name"], "addr": f"{peer['addr']}:{peer['probe_port']}", "ok": res.ok,
                    "error_class": res.error_class, "rtt_ms": res.rtt_ms, "message": res.message}

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(peers)))) as pool:
            probes = list(pool.map(probe, peers))
        master = view.master
        to_master = connect_probe(master["addr"], master["probe_port"], timeout, source=view.me["addr"], payload=b"P\n")
        return {"probes": probes, "peers_total": len(view.nodes) - 1, "addr": view.me["addr"],
                "master": {"ok": to_master.ok, "rtt_ms": to_master.rtt_ms, "error_class": to_master.error_class}}

    def exports(self, facts: dict) -> dict:
        if not isinstance(facts.get("probes"), list):
            return {}
        return {"links": [{k: p.get(k) for k in ("peer", "ok", "rtt_ms", "error_class")}
                          for p in facts["probes"] if isinstance(p, dict)]}

    def compare(self, facts_by_node, opts):
        into = failed_into(facts_by_node)

        def judge(node, facts):
            probes = facts.get("probes", [])
            bad = [p for p in probes if not p.get("ok")]
            for p in bad:
                cls = p.get("error_class") or "failed"
                yield self.fail(
                    f"link {node} -> {p['peer']} {cls} (TCP to {p['addr']})", [node, p["peer"]],
                    actual=cls, expected="TCP connect succeeds",
                    fix=f"{connect_fix(cls)}. {PORTS_NOTE}; on {shlex.quote(str(p['peer']))}: {accept_lines(into.get(p['peer'], []))}",
                    details={"src": node, "dst": p["peer"], "class": cls, "message": p.get("message")},
                )
            rtts = [p["rtt_ms"] for p in probes if p.get("ok") and p.get("rtt_ms") is not None]
            slow = [p for p in probes if p.get("ok") and (p.get("rtt_ms") or 0) > opts["warn_rtt_ms"]]
            for p in slow:
                yield self.warn(f"link {node} -> {p['peer']} slow: {p['rtt_ms']:.1f} ms round trip", [node, p["peer"]],
                                actual=p["rtt_ms"], expected=f"<= {opts['warn_rtt_ms']} ms",
                                fix="check the route between these nodes (`ip route get <addr>`; a VPN or a "
                                    "different fabric?) and that both use the same interface")
            if not bad and probes:
                yield self.passed(f"{len(probes)} link(s) from {node} open, max round trip {max(rtts):.1f} ms",
                                  [node], actual=max(rtts))
            elif not probes and facts.get("peers_total", 0) == 0:
                yield self.skip("single node: no peers to probe", [node])

        return per_node(facts_by_node, judge)


def failed_into(facts_by_node) -> dict[str, list[str]]:
    """Node -> the addresses (or names, where a node's facts lack its address) of the peers whose link into
    it failed: every one needs its ACCEPT rule there, so each link's fix lists them all."""
    into: dict[str, list[str]] = {}
    for node, facts in facts_by_node.items():
        # another node's text goes into a line to paste: quoted (the placeholder is for the reader to replace)
        src = shlex.quote(facts["addr"]) if isinstance(facts.get("addr"), str) else f"<{node} address>"
        for p in facts.get("probes") or []:
            if isinstance(p, dict) and not p.get("ok") and src not in into.setdefault(str(p.get("peer")), []):
                into[str(p.get("peer"))].append(src)
    return into


def accept_lines(sources: list[str], most: int = 8) -> str:
    """The iptables lines to paste on a node that must accept TCP from ``sources`` (at most ``most``)."""
    lines = "; ".join(f"iptables -I INPUT -s {a} -p tcp -j ACCEPT" for a in sources[:most])
    more = len(sources) - most
    return lines + (f"  (and the same for the other {more} nodes, or their subnet)" if more > 0 else "")
