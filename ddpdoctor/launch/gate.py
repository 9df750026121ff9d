"""The preflight gate of run-trainer: this node alone, or every node through the cluster preflight on the
port after the job's, and the interfaces it found handed to the job's NCCL/gloo settings."""
from __future__ import annotations

from dataclasses import replace

from .config import TrainerConfig


def run_preflight(cfg: TrainerConfig, request, quiet: bool) -> dict:
    """The preflight of this job: the user's typed request (--preflight-args) completed with the job's own
    settings, through the one preflight entry; the cluster meets on the port after the job's."""
    from .. import preflight
    from ..report.console import render_preflight, render_worker_line, stderr_console

    if cfg.nnodes > 1:
        host, _, port = cfg.master.rpartition(":")
        request = replace(request, master=f"{host}:{int(port) + 1}", nnodes=cfg.nnodes, local_addr=cfg.local_addr,
                          nproc_per_node=cfg.nproc_per_node, rdzv_id=cfg.rendezvous_id())
    else:
        request = replace(request, nnodes=1)
    doc = preflight.run(request, quiet=quiet)
    if cfg.nnodes > 1:
        cfg.env.update(interfaces_from(doc))
    if not quiet:
        if doc.get("role") == "worker":  # one preflight summary per cluster: the master's (srun merges outputs)
            render_worker_line(doc, stderr_console(), hints=False)
        else:
            render_preflight(doc, stderr_console(), verbose=0, quiet=True)
    return {"verdict": doc["verdict"], "failures": [r for r in doc["results"] if r["level"] == "fail"],
            "interfaces": dict(cfg.env)}


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
