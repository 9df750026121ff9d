"""Interface-name rules shared by the checks: NCCL_SOCKET_IFNAME's syntax and address-to-interface lookup."""
from __future__ import annotations


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
    """The interface holding a local address, with its MTU and state (psutil)."""
    if not addr:
        return None
    import psutil

    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == addr for a in addrs):
            st = stats.get(name)
            return {"iface": name, "addr": addr, "mtu": st.mtu if st else None, "up": st.isup if st else None}
    return {"iface": None, "addr": addr, "mtu": None, "up": None}
