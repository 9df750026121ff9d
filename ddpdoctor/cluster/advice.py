"""What to paste after a passing preflight: interface variables that work on every node and torchrun lines."""
from __future__ import annotations

import shlex

from ..api import Level


def chosen_interfaces(nodes: dict) -> dict[str, str]:
    """Node name -> the interface that routes to the master (from the names check's facts)."""
    out = {}
    for name, data in nodes.items():
        iface = ((((data.get("facts") or {}).get("names") or {}).get("route_to_master")) or {}).get("iface")
        if iface:
            out[name] = iface
    return out


def advice_lines(nodes: dict, view, cfg, results) -> list[str]:
    if any(r.level is Level.FAIL for r in results):
        return []
    lines: list[str] = []
    ifaces = chosen_interfaces(nodes)
    env_prefix: dict[str, str] = {}
    if ifaces:
        distinct = sorted(set(ifaces.values()))
        if len(distinct) == 1:
            lines.append(f"Interface that works on every node: export NCCL_SOCKET_IFNAME=={distinct[0]} "
                         f"GLOO_SOCKET_IFNAME={distinct[0]}")
            env_prefix = {n: f"NCCL_SOCKET_IFNAME=={distinct[0]} GLOO_SOCKET_IFNAME={distinct[0]} " for n in ifaces}
        else:
            lines.append("Interfaces differ per node (set them per node): "
                         + ", ".join(f"{n}: {i}" for n, i in sorted(ifaces.items())))
            env_prefix = {n: f"NCCL_SOCKET_IFNAME=={i} GLOO_SOCKET_IFNAME={i} " for n, i in ifaces.items()}
    nproc = cfg.nproc_per_node or _gpus(nodes) or 1
    rdzv_id = cfg.rdzv_id or "$SLURM_JOB_ID"
    master_addr = view.master.get("addr") or cfg.master.host
    lines.append("torchrun line for each node (identical except the environment):")
    for node in view.nodes:
        prefix = env_prefix.get(node["name"], "")
        lines.append(
            f"  {node['name']}: {prefix}torchrun --nnodes {len(view.nodes)} --nproc-per-node {nproc} "
            f"--rdzv-backend c10d --rdzv-endpoint {master_addr}:{cfg.master.port} "
            f"--rdzv-id {shlex.quote(str(rdzv_id)) if cfg.rdzv_id else rdzv_id} train.py  # the port is free once preflight ends"
        )
    return lines


def _gpus(nodes: dict) -> int | None:
    counts = []
    for data in nodes.values():
        gpus = ((data.get("facts") or {}).get("gpu") or {}).get("gpus")
        if gpus:
            counts.append(len(gpus))
    return min(counts) if counts else None
