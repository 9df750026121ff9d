"""The preflight gate of run-trainer: this node alone, or every node through the cluster preflight on the
port after the job's, and the interfaces it found handed to the job's NCCL/gloo settings."""
from __future__ import annotations

from ..errors import UsageError
from .config import TrainerConfig


def run_preflight(cfg: TrainerConfig, quiet: bool) -> dict:
    from ..cli import common
    from ..preflight import make_plan, run_single_node
    from ..report.console import render_preflight

    flags = parse_preflight_args(cfg.preflight_args)
    sets = (*flags["sets"], "gpu-perf.enabled=true") if flags["perf"] else flags["sets"]
    plan = make_plan(only=flags["only"], skip=flags["skip"], config_path=flags["config_path"], sets=sets,
                     run_flags={"nnodes": cfg.nnodes, "gpus_per_node": flags["gpus_per_node"],
                                "timeout": flags["timeout"]})
    if cfg.nnodes > 1:
        from ..cluster import join

        host, _, port = cfg.master.rpartition(":")
        doc = join.run_from_cli(plan, master=f"{host}:{int(port) + 1}", nnodes=cfg.nnodes, node_rank=None,
                                local_addr=cfg.local_addr, timeout=flags["timeout"], token=flags["token"],
                                nproc_per_node=cfg.nproc_per_node, rdzv_id=cfg.rendezvous_id(),
                                code_dir=flags["code_dir"], shared_dir=flags["shared_dir"], local_nodes=None,
                                quiet=quiet)
        cfg.env.update(interfaces_from(doc))
    else:
        doc = run_single_node(plan)
    if not quiet:
        render_preflight(doc, common.console(stderr=True), verbose=0, quiet=True)
    return {"verdict": doc["verdict"], "failures": [r for r in doc["results"] if r["level"] == "fail"],
            "interfaces": dict(cfg.env)}


OWNED = ("master", "nnodes", "node_rank", "local_addr", "nproc_per_node", "rdzv_id", "local_nodes")


def parse_preflight_args(args: list[str]) -> dict:
    """--preflight-args through `ddpdoctor preflight`'s own parser: every preflight flag works, a wrong one
    is a usage error (exit 2, one line), and the flags run-trainer itself decides are refused, not ignored."""
    import click
    from click.core import ParameterSource

    from ..cli.preflight import preflight

    if {"--help", "-h"} & set(args):  # click would print preflight's help and end run-trainer with exit 0
        raise UsageError("--preflight-args: --help is not a preflight option to pass on")
    try:
        ctx = preflight.make_context("preflight", list(args))
    except click.ClickException as exc:
        raise UsageError(f"--preflight-args: {exc.format_message()}") from exc
    given = [name for name in OWNED if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        raise UsageError(f"--preflight-args: {', '.join('--' + g.replace('_', '-') for g in given)} "
                         "come from run-trainer's own flags")
    return ctx.params


def interfaces_from(doc: dict | None) -> dict:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: the interface this node reaches the master through."""
    if not doc:
        return {}
    from ..runner import exported

    me = doc.get("this_node")
    iface = (exported((doc.get("nodes") or {}).get(me) or {}, "interface") or {}).get("name")
    if not iface or iface == "lo":
        return {}
    return {"NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface}
