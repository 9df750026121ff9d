"""The preflight gate of run-trainer: this node alone, or every node through the cluster preflight on the
port after the job's, and the interfaces it found handed to the job's NCCL/gloo settings."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from .config import TrainerConfig


def run_preflight(cfg: TrainerConfig, request, show: Callable[[dict], None] | None = None) -> dict:
    """The preflight of this job: the user's typed request (--preflight-args) completed with the job's own
    settings, through the one preflight entry; the cluster meets on the port after the job's. ``show``
    renders the document (the command's part: this engine renders nothing); None for --json or --quiet."""
    from .. import preflight

    if cfg.nnodes > 1:
        host, _, port = cfg.master.rpartition(":")
        request = replace(request, master=f"{host}:{int(port) + 1}", nnodes=cfg.nnodes, local_addr=cfg.local_addr,
                          nproc_per_node=cfg.nproc_per_node, rdzv_id=cfg.rendezvous_id(),
                          node_command=f"ddpdoctor run-trainer --nnodes {cfg.nnodes} --master {cfg.master} ...")
    else:
        request = replace(request, nnodes=1)
    doc = preflight.run(request, quiet=show is None)
    if cfg.nnodes > 1:
        cfg.env.update(interfaces_from(doc))
    if show is not None:
        show(doc)
    # "document": the whole preflight, which the command keeps beside run.json (not part of run.json's summary)
    # A node without the run's key cannot check the master's signature: a PASS it received may be forged, so it
    # gates as a fail (the preflight itself exits 5, never 0, on such a verdict)
    verified = (doc.get("auth") or {}).get("verdict_verified") is not False
    return {"verdict": doc["verdict"] if verified else "fail", "verified": verified,
            "failures": [r for r in doc["results"] if r["level"] == "fail"],
            "interfaces": dict(cfg.env), "document": doc}


def interfaces_from(doc: dict | None) -> dict:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: the interface this node reaches the master through."""
    if not doc:
        return {}
    from ..exports import exported

    me = doc.get("this_node")
    iface = (exported((doc.get("nodes") or {}).get(me) or {}, "interface") or {}).get("name")
    if not iface or iface == "lo":
        return {}
    return {"NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface}
