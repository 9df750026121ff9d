"""network: this node's name and what it resolves to (loopback is flagged: gloo and c10d would advertise it),
its interfaces with addresses, MTU and state, and the interface of the default route."""
from __future__ import annotations

import socket
from shlex import quote

from ddpdoctor.api import Check, Option, is_loopback, lookup, passed_if_quiet, per_node

from .support.loopback import loopback_scope, sharing_loopback


def resolve_name(host: str) -> dict:
    res = lookup("forward", host)
    return {"addrs": res["answer"], "error": res["error"]}


def default_route_ifaces() -> dict:
    """The kernel's default routes (IPv4 from /proc/net/route, IPv6 from /proc/net/ipv6_route)."""
    out: dict = {"ipv4": None, "ipv6": None}
    try:
        with open("/proc/net/route") as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                if len(cols) > 7 and cols[1] == "00000000" and cols[7] == "00000000":
                    out["ipv4"] = cols[0]
                    break
    except OSError:
        pass
    try:
        with open("/proc/net/ipv6_route") as fh:
            for line in fh:
                cols = line.split()
                if len(cols) >= 10 and cols[0] == "0" * 32 and cols[1] == "00" and cols[9] != "lo":
                    out["ipv6"] = cols[9]
                    break
    except OSError:
        pass
    return out


def interfaces() -> list[dict]:
    import psutil

    stats = psutil.net_if_stats()
    out = []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        st = stats.get(name)
        out.append({
            "name": name,
            "ipv4": [a.address for a in addrs if a.family == socket.AF_INET],
            "ipv6": [a.address.split("%")[0] for a in addrs if a.family == socket.AF_INET6],
            "mtu": st.mtu if st else None,
            "up": bool(st.isup) if st else None,
            "speed_mbps": st.speed if st else None,
        })
    return out


class NetworkCheck(Check):
    name = "network"
    description = "Hostname/FQDN and what they resolve to (loopback flagged), interfaces, MTU, state, default route"
    options = {"min_mtu": Option(1280, "an up, addressed interface with a smaller MTU is a warning")}

    def gather(self, ctx) -> dict:
        host = socket.gethostname()
        fqdn = socket.getfqdn()
        return {
            "hostname": host,
            "fqdn": fqdn,
            # getfqdn() falls back to "localhost" when there is no FQDN: that says nothing about this node.
            "resolves": {h: resolve_name(h) for h in sorted({host, fqdn}) if h and h != "localhost"},
            "interfaces": interfaces(),
            "default_route": default_route_ifaces(),
            "loopback_scope": loopback_scope(),
        }

    def compare(self, facts_by_node, opts):
        # every node of the run on one machine and network namespace: a hostname on 127.x reaches them all
        shared = int(opts.get("nnodes") or 1) > 1 and sharing_loopback(facts_by_node) >= int(opts.get("nnodes") or 1)
        return per_node(facts_by_node, lambda node, f: self.judge(node, f, opts, shared))

    def judge(self, node: str, f: dict, opts, shared: bool = False) -> list:
        """One node; ``shared``: every node of the run shares this node's loopback."""
        out = []
        multi = int(opts.get("nnodes") or 1) > 1
        host = f.get("hostname") or "?"
        ifaces = f.get("interfaces") or []
        routable = [i for i in ifaces if i.get("up") and not i["name"].startswith("lo")
                    and any(not is_loopback(a) for a in i.get("ipv4", []) + i.get("ipv6", []))]
        default = (f.get("default_route") or {}).get("ipv4") or (f.get("default_route") or {}).get("ipv6")
        suggest = default or (routable[0]["name"] if routable else None)
        # One interface advice per screen: in a cluster run the names check knows the interface that reaches the
        # master and the advice after a pass pins it on every node; a guess from this node's default route
        # (often not the cluster fabric) would contradict it. Alone, this node's default route is the best guess.
        if multi:
            ifname_fix = "pin the interface the nodes reach each other through (the names check names it)"
        else:
            # spelt as the names check and the advice after a pass spell it ('==': exactly that interface)
            ifname_fix = (f"export NCCL_SOCKET_IFNAME={quote('=' + suggest)} GLOO_SOCKET_IFNAME={quote(suggest)} "
                          f"(NCCL's '={suggest}' means exactly {suggest}; without that '=' it would match every "
                          f"interface whose name starts with {suggest})" if suggest
                          else "give this node an interface the other nodes can reach")
        on_loopback = {}  # names that resolve only to loopback: the same fact in every mode, judged by mode
        for name, res in sorted((f.get("resolves") or {}).items()):
            addrs = res.get("addrs") or []
            if addrs and not res.get("error") and all(is_loopback(a) for a in addrs):
                on_loopback[name] = addrs
            if res.get("error"):
                make = self.fail if multi else self.warn
                out.append(make(f"{name} does not resolve: {res['error']}", [node], actual=res["error"],
                                expected="an address", fix=f"add this node's IP and {quote(str(name))} as a line of /etc/hosts, or fix DNS"))
            elif addrs and all(is_loopback(a) for a in addrs) and not shared:
                # gloo binds the address the hostname resolves to: peers would be told 127.x. A warning here;
                # in a cluster run the names check knows the advertised address and fails it where it matters.
                why = ("gloo and c10d would advertise an address other nodes cannot reach" if multi else
                       "harmless while every rank runs on this machine; gloo and c10d would advertise it to other "
                       "nodes, which cannot reach it")
                out.append(self.warn(f"{name} resolves only to loopback ({', '.join(addrs)}): {why}", [node], actual=addrs,
                                expected="a routable address",
                                fix=f"map {quote(str(name))} to the node's real IP in /etc/hosts, or {ifname_fix}"))
        if not routable:
            make = self.fail if multi else self.warn
            out.append(make("no interface is up with a non-loopback address: this node cannot reach others", [node],
                            actual=[i["name"] for i in ifaces], expected="an up, addressed interface",
                            fix="bring the cluster interface up (ip link set <iface> up) and give it an address"))
        for i in routable:
            if i.get("mtu") and i["mtu"] < opts["min_mtu"]:
                out.append(self.warn(f"interface {i['name']} has MTU {i['mtu']}", [node], actual=i["mtu"],
                                     expected=f">= {opts['min_mtu']}",
                                     fix=f"ip link set {quote(str(i['name']))} mtu 1500  # or the fabric's MTU, same on every node"))
        names = lambda: ", ".join(f"{i['name']} ({', '.join(i['ipv4'] or i['ipv6'])}, MTU {i['mtu']})"  # noqa: E731
                                  for i in routable[:4])
        resolved = (f"{host} resolves to a routable address" if not on_loopback else
                    f"{', '.join(on_loopback)} resolves only to loopback "
                    f"({', '.join(a for addrs in on_loopback.values() for a in addrs)}), which every node of this run "
                    "shares (all on this machine): no other machine has to reach it")
        return passed_if_quiet(out, self, [node], lambda: f"{resolved}; "
                               f"{f'default route via {default}' if default else 'no default route'}; "
                               f"interfaces: {names()}", actual=default)
