"""What to paste after a passing preflight: interface variables that work on every node and torchrun lines.

Every value embedded in a line comes from structured fields (another node's exports among them) and is
shell-quoted: an interface called ``eth0; curl ... | sh`` is pasted as one harmless word."""
from __future__ import annotations

import shlex

from ..api import Level
from ..exports import exported
from ..launchers import job_id_var


def chosen_interfaces(nodes: dict) -> dict[str, str]:
    """Node name -> the interface that routes to the master (the "interface" a check exports: names)."""
    out = {}
    for name, data in nodes.items():
        iface = exported(data or {}, "interface") if isinstance(data, dict) else None
        if isinstance(iface, dict) and iface.get("name"):
            out[name] = str(iface["name"])[:64]
    return out


IFNAME_NOTE = ("('==' makes NCCL use exactly that interface; a single '=' is a prefix match, so eth0 would "
               "also take eth01)")


def _level(r) -> str:
    level = r.get("level") if isinstance(r, dict) else getattr(r, "level", None)
    return getattr(level, "value", level)


def advice_lines(nodes: dict, view, cfg, results) -> list[str]:
    """What to paste after a pass: one line per command, each identical command once for all its nodes.
    ``results`` are Results (the master) or their JSON (a node rebuilding the lines from a verdict)."""
    if any(_level(r) == Level.FAIL.value for r in results):
        return []
    from ..grouping import compress_hosts

    lines: list[str] = []
    ifaces = chosen_interfaces(nodes)
    q = shlex.quote
    env_prefix: dict[str, str] = {n: f"NCCL_SOCKET_IFNAME={q('=' + i)} GLOO_SOCKET_IFNAME={q(i)} "
                                  for n, i in ifaces.items() if not _loopback(i)}
    if ifaces:
        distinct = sorted(set(ifaces.values()))
        if len(distinct) == 1 and _loopback(distinct[0]):
            # Every node ran on this machine (--local-nodes): loopback is no interface to pin for a real job.
            lines.append("# every node ran on this machine (loopback): on real nodes, pin the interface they reach "
                         "each other through, the same name on every node")
        elif len(distinct) == 1:
            lines.append(f"export NCCL_SOCKET_IFNAME={q('=' + distinct[0])} GLOO_SOCKET_IFNAME={q(distinct[0])}  "
                         f"# the interface that works on every node {IFNAME_NOTE}")
        else:
            lines.append(f"# interfaces differ per node: set them per node {IFNAME_NOTE}")
    if getattr(cfg, "external_store", False):
        # Under torchrun the nodes met in its agents' store (MASTER_ADDR:MASTER_PORT, a port torchrun drew for
        # this run): no line made from it is the user's rendezvous. The line they launched with is the one.
        lines.append("# your torchrun command works: launch the training with it on every node, your script in place "
                     "of ddpdoctor preflight")
        return lines
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
        lines.append(f"# on {where}:".replace("\n", " "))
        endpoint = f"[{master_addr}]" if ":" in str(master_addr) else str(master_addr)
        lines.append(f"{prefix}torchrun --nnodes {len(view.nodes)} --nproc-per-node {int(nproc)} --rdzv-backend c10d "
                     f"--rdzv-endpoint {q(f'{endpoint}:{cfg.master.port}')} --rdzv-id {_rdzv_id(cfg)} train.py")
    lines.append("# the rendezvous port is free once the preflight ends; --rdzv-id must be the same on every node")
    return lines


def _loopback(iface: str) -> bool:
    return iface == "lo" or iface.startswith("lo0") or iface.startswith("lo:")


def _rdzv_id(cfg) -> str:
    """The id every node must share: the one given, the scheduler's job id where there is a scheduler,
    else a fixed one (never $RANDOM: each node would draw its own)."""
    if cfg.rdzv_id:
        return shlex.quote(str(cfg.rdzv_id))
    var = job_id_var(getattr(cfg, "launcher", None))
    return var or f"ddp-{cfg.master.port}"


def _gpus(nodes: dict) -> int | None:
    counts = []
    for data in nodes.values():
        gpus = exported(data or {}, "gpus")
        if isinstance(gpus, dict) and isinstance(gpus.get("count"), int) and gpus["count"]:
            counts.append(gpus["count"])
    return min(counts) if counts else None
