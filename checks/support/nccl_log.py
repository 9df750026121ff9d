"""Reading NCCL_DEBUG=INFO output: which network transport NCCL chose, its first WARN, and whether that
choice is right for the fabric the node has. Pure functions over text; no NCCL needed.

NCCL states its choice as "Using network <Name>" (IB, Socket, or a plugin's name: "AWS Libfabric" /
"Libfabric" for aws-ofi-nccl, "IBext" for the SHARP plugin); older versions only print the transport's init
line ("NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:...", "NET/Socket : Using [0]eth0:...") or the ring's
"via NET/AWS Libfabric/0". Lines such as "NET/IB : No device found." or "NET/Plugin : No plugin found" are
attempts, not choices, and are not mistaken for one.
"""
from __future__ import annotations

import re

IB, OFI, SOCKET = "NET/IB", "NET/OFI", "NET/Socket"

_USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<name>[^\r\n]+)")
_VIA_NET = re.compile(r"via NET/(?P<name>[^/\r\n]+)/")
_INIT_LINE = re.compile(r"NET/(?P<t>IB|Socket|OFI)\s*:?\s*(?P<rest>[^\r\n]*)")
_WARN = re.compile(r"^.*NCCL WARN.*$", re.MULTILINE)


def _classify(name: str) -> str | None:
    n = name.strip().lower()
    if "libfabric" in n or "ofi" in n:
        return OFI
    if n.startswith("ib") or "sharp" in n or "roce" in n:
        return IB
    if n.startswith("socket"):
        return SOCKET
    return None


def parse_nccl_transport(log_text: str) -> dict:
    """{"transport": "NET/IB" | "NET/OFI" | "NET/Socket" | None, "first_warn": str | None} from an NCCL log.

    The last "Using network X" wins (it is NCCL's decision); without one, the ring/channel "via NET/X/" lines;
    without those, a transport init line that says "Using" ("NET/OFI Selected Provider is efa" for OFI)."""
    text = log_text or ""
    transport = None
    for m in _USING_NETWORK.finditer(text):
        transport = _classify(m.group("name")) or transport
    if transport is None:
        for m in _VIA_NET.finditer(text):
            transport = _classify(m.group("name")) or transport
    if transport is None:
        for m in _INIT_LINE.finditer(text):
            t, rest = m.group("t"), m.group("rest").strip().lower()
            if t == "OFI" and rest.startswith("selected provider"):
                transport = OFI
            elif t in ("IB", "Socket") and rest.startswith("using"):
                # NCCL initialises IB before falling back to sockets: a usable IB device wins.
                transport = IB if t == "IB" or transport == IB else SOCKET
    warn = _WARN.search(text)
    return {"transport": transport, "first_warn": warn.group(0).strip() if warn else None}


def judge_transport(transport: str | None, ib_devices: list[str] | None = None, efa: bool = False,
                    env: dict | None = None) -> dict:
    """Is the chosen transport right for this node's fabric? Returns {"level": "pass"|"warn"|"skip",
    "summary", "fix"}: sockets while InfiniBand/RoCE or EFA devices exist is a warning (NCCL fell back to TCP,
    usually several times slower); NCCL_IB_DISABLE=1 set on purpose is named as the cause."""
    env = env or {}
    ib_devices = [d for d in (ib_devices or []) if d]
    if transport is None:
        return {"level": "skip", "summary": "NCCL's log does not say which network it used (single node, or "
                "NCCL_DEBUG=INFO output not captured)", "fix": ""}
    if transport == SOCKET and efa:
        return {"level": "warn", "summary": "NCCL uses TCP sockets although this node has EFA devices: the "
                "aws-ofi-nccl plugin was not loaded",
                "fix": "put aws-ofi-nccl on LD_LIBRARY_PATH (e.g. export LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:"
                       "/opt/amazon/efa/lib:$LD_LIBRARY_PATH), pass the EFA devices into the container (--device "
                       "/dev/infiniband/uverbs0 ...) with --ulimit memlock=-1, and check `fi_info -p efa -t FI_EP_RDM`"}
    if transport == SOCKET and ib_devices:
        if str(env.get("NCCL_IB_DISABLE", "")).strip() == "1":
            return {"level": "warn", "summary": f"NCCL uses TCP sockets because NCCL_IB_DISABLE=1 although this node "
                    f"has InfiniBand/RoCE devices ({', '.join(ib_devices[:4])})",
                    "fix": "unset NCCL_IB_DISABLE (it is a slow fallback for debugging only)"}
        return {"level": "warn", "summary": f"NCCL uses TCP sockets although this node has InfiniBand/RoCE devices "
                f"({', '.join(ib_devices[:4])})",
                "fix": f"export NCCL_IB_HCA={','.join(ib_devices[:8])}  # and check `ibv_devinfo` shows PORT_ACTIVE, "
                       "/dev/infiniband is in the container, memlock is unlimited (ulimit -l); for RoCE set "
                       "NCCL_IB_GID_INDEX to the RoCEv2 IPv4 GID"}
    return {"level": "pass", "summary": f"NCCL uses {transport}" + (
        " (no InfiniBand/EFA device on this node)" if transport == SOCKET else ""), "fix": ""}
