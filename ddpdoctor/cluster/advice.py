"""What to paste after a passing preflight: interface variables that work on every node and torchrun lines."""
from __future__ import annotations

import shlex

from ..api import Level
from ..runner import exported


def chosen_interfaces(nodes: dict) -> dict[str, str]:
    """Node name -> the interface that routes to the master (the "interface" a check exports: names)."""
    out = {}
    for name, data in nodes.items():
        iface = exported(data or {}, "interface")
        if isinstance(iface, dict) and iface.get("name"):
            out[name] = str(iface["name"])
    return out


IFNAME_NOTE = ("('==' makes NCCL use exactly that interface; a single '=' is a prefix match, so eth0 would "
               "also take eth01)")
JOB_ID_VARS = {"slurm": "$SLURM_JOB_ID", "pbs": "$PBS_JOBID"}


def advice_lines(nodes: dict, view, cfg, results) -> list[str]:
    """What to paste after a pass: one line per command, each identical command once for all its nodes."""
    if any(r.level is Level.FAIL for r in results):
        return []
    from ..grouping import compress_hosts

    lines: list[str] = []
    ifaces = chosen_interfaces(nodes)
    env_prefix: dict[str, str] = {n: f"NCCL_SOCKET_IFNAME=={i} GLOO_SOCKET_IFNAME={i} " for n, i in ifaces.items()
                                  if not _loopback(i)}
    if ifaces:
        distinct = sorted(set(ifaces.values()))
        if len(distinct) == 1 and _loopback(distinct[0]):
            # Every node ran on this machine (--local-nodes): loopback is no interface to pin for a real job.
            lines.append("# every node ran on this machine (loopback): on real nodes, pin the interface they reach "
                         "each other through, the same name on every node")
        elif len(distinct) == 1:
            lines.append(f"export NCCL_SOCKET_IFNAME=={distinct[0]} GLOO_SOCKET_IFNAME={distinct[0]}  "
                         f"# the interface that works on every node {IFNAME_NOTE}")
        else:
            lines.append(f"# interfaces differ per node: set them per node {IFNAME_NOTE}")
    default_nproc = cfg.nproc_per_node or _gpus(nodes) or 1
    master_addr = view.master.get("addr") or cfg.master.host
    by_command: dict[tuple[str, int], list[str]] = {}
    for node in view.nodes:
        # each node's own --nproc-per-node: nodes may start different counts (heterogeneous GPUs)
        nproc = (node.get("launch") or {}).get("nproc_per_node") or default_nproc
        prefix = env_prefix.get(node["name"], "") if len(set(ifaces.values())) > 1 else ""
        by_command.setdefault((prefix, nproc), []).append(node["name"])
    for (prefix, nproc), names in by_command.items():
        where = "every node" if len(by_command) == 1 else compress_hosts(names)
        lines.append(f"# on {where}:")
        lines.append(f"{prefix}torchrun --nnodes {len(view.nodes)} --nproc-per-node {nproc} --rdzv-backend c10d "
                     f"--rdzv-endpoint {master_addr}:{cfg.master.port} --rdzv-id {_rdzv_id(cfg)} train.py")
    lines.append("# the rendezvous port is free once the preflight ends; --rdzv-id must be the same on every node")
    return lines


def _loopback(iface: str) -> bool:
    return iface == "lo" or iface.startswith("lo0") or iface.startswith("lo:")


def _rdzv_id(cfg) -> str:
    """The id every node must share: the one given, the scheduler's job id where there is a scheduler,
    else a fixed one (never $RANDOM: each node would draw its own)."""
    if cfg.rdzv_id:
        return shlex.quote(str(cfg.rdzv_id))
    var = JOB_ID_VARS.get(getattr(cfg, "launcher", None) or "")
    return var or f"ddp-{cfg.master.port}"


def _gpus(nodes: dict) -> int | None:
    counts = []
    for data in nodes.values():
        gpus = exported(data or {}, "gpus")
        if isinstance(gpus, dict) and isinstance(gpus.get("count"), int) and gpus["count"]:
            counts.append(gpus["count"])
    return min(counts) if counts else None
