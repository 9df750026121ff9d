"""The preflight gate of run-trainer: this node alone, or every node through the cluster preflight on the
port after the job's, and the interfaces it found handed to the job's NCCL/gloo settings."""
from __future__ import annotations

from .config import TrainerConfig


def run_preflight(cfg: TrainerConfig, quiet: bool) -> dict:
    from ..cli import common
    from ..preflight import make_plan, run_single_node
    from ..report.console import render_preflight

    args = list(cfg.preflight_args)
    only, skip, sets = _pick(args, "--only"), _pick(args, "--skip"), _pick(args, "--set")
    plan = make_plan(only=only, skip=skip, sets=sets,
                     run_flags={"nnodes": cfg.nnodes, "gpus_per_node": None, "timeout": 60.0})
    if cfg.nnodes > 1:
        from ..cluster import join

        host, _, port = cfg.master.rpartition(":")
        doc = join.run_from_cli(plan, master=f"{host}:{int(port) + 1}", nnodes=cfg.nnodes, node_rank=None,
                                local_addr=cfg.local_addr, timeout=60.0, token=None,
                                nproc_per_node=cfg.nproc_per_node, rdzv_id=cfg.rendezvous_id(), code_dir=None,
                                shared_dir=None, local_nodes=None, quiet=quiet)
        cfg.env.update(interfaces_from(doc))
    else:
        doc = run_single_node(plan)
    if not quiet:
        render_preflight(doc, common.console(stderr=True), verbose=0, quiet=True)
    return {"verdict": doc["verdict"], "failures": [r for r in doc["results"] if r["level"] == "fail"],
            "interfaces": dict(cfg.env)}


def _pick(args: list[str], flag: str) -> list[str]:
    out = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out


def interfaces_from(doc: dict | None) -> dict:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: the interface this node reaches the master through."""
    if not doc:
        return {}
    me = doc.get("this_node")
    facts = ((doc.get("nodes") or {}).get(me) or {}).get("facts") or {}
    iface = ((facts.get("names") or {}).get("route_to_master") or {}).get("iface")
    if not iface or iface == "lo":
        return {}
    return {"NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface}
