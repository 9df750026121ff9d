"""Interface-name rules shared by the checks: NCCL_SOCKET_IFNAME's syntax and address-to-interface lookup."""
from __future__ import annotations

from ddpdoctor.api import is_loopback


def nccl_ifname_matches(spec: str, iface: str) -> bool:
    """Whether NCCL would use ``iface`` under NCCL_SOCKET_IFNAME=spec.

    NCCL's syntax: a comma list of prefixes; ``^`` before the list excludes instead; ``=`` before the list
    asks for exact names (``^=`` both).
    """
    spec = spec.strip()
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    hit = any(iface == n if exact else iface.startswith(n) for n in names)
    return not hit if exclude else hit


def gloo_ifname_problem(value: str) -> str | None:
    """GLOO_SOCKET_IFNAME takes one concrete interface name; NCCL's list/^/= syntax silently breaks it."""
    if any(c in value for c in ",^="):
        return "GLOO_SOCKET_IFNAME takes one concrete interface name, not NCCL's list/^/= syntax"
    return None


def iface_of_addr(addr: str | None) -> dict | None:
    """The interface holding a local address, with its MTU and state (psutil). A loopback address is held by
    the interface whose loopback prefix contains it: lo's 127.0.0.1/8 makes every 127.x local (the kernel's
    local route), so a node on --local-addr 127.0.0.2 is on lo too."""
    if not addr:
        return None
    import psutil

    stats = psutil.net_if_stats()
    all_addrs = psutil.net_if_addrs().items()
    holder = next((name for name, addrs in all_addrs if any(a.address.split("%")[0] == addr for a in addrs)), None)
    if holder is None and is_loopback(addr):
        holder = next((name for name, addrs in all_addrs if any(_in_loopback_prefix(addr, a) for a in addrs)), None)
    if holder is not None:
        st = stats.get(holder)
        return {"iface": holder, "addr": addr, "mtu": st.mtu if st else None, "up": st.isup if st else None}
    return {"iface": None, "addr": addr, "mtu": None, "up": None}


def _in_loopback_prefix(addr: str, snic) -> bool:
    """Whether ``addr`` lies in the loopback network of one of psutil's interface addresses (``snic``)."""
    import ipaddress

    if not snic.netmask or not is_loopback(snic.address):
        return False
    try:
        net = ipaddress.ip_network(f"{snic.address.split('%')[0]}/{snic.netmask}", strict=False)
        return ipaddress.ip_address(addr.split("%")[0]) in net
    except ValueError:
        return False
