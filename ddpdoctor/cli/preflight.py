"""`ddpdoctor preflight`: this machine alone, or every node of a cluster meeting through the master.

Parse, then a typed config, then run: flags become a Plan (checks, options, run settings) and, for a
cluster, a JoinConfig; the engine produces one JSON document; rendering comes last.
"""
from __future__ import annotations

import click

from ..exitcodes import ExitCode
from ..inputs import MAX_NODES
from . import common, monitoring


def _rdzv_id(value):
    """A rendezvous id is compared and printed in a torchrun line: the one rule for ids (inputs.check_run_id)."""
    from ..inputs import check_run_id

    return None if value is None else check_run_id(value)


def _hosts(value):
    """--hosts a,b,c or --hosts @FILE (one host per line, like an MPI host file or PBS_NODEFILE)."""
    if not value:
        return None
    if value.startswith("@"):
        from ..cluster.launcher_env import hosts_of_node_file, read_node_file

        try:
            text = read_node_file(value[1:])  # bounded: a huge file is one line, not a long read
        except OSError as exc:
            raise click.BadParameter(f"{value[1:]}: {exc.strerror or exc}", param_hint="--hosts") from None
        names = hosts_of_node_file(text, f"--hosts {value}")
    else:
        names = [h.strip() for h in value.split(",") if h.strip()]
    names = list(dict.fromkeys(names))
    if not names or len(names) > MAX_NODES:
        raise click.BadParameter(f"expected 1 to {MAX_NODES} host names", param_hint="--hosts")
    from ..cluster.config import address_like

    bad = next((h for h in names if not address_like(h)), None)
    if bad is not None:  # 'b;c' from a mistyped list would be named in messages and fix lines as a host
        raise click.BadParameter(f"{bad[:80]!r} is neither a host name nor an IP address", param_hint="--hosts")
    return names


def _baseline(value):
    """--baseline FILE: a known-good run's values, read and validated now (one line and exit 2 if bad)."""
    if not value:
        return None
    from ..baseline import load

    return load(value)


# What a --local-nodes child is told by the cluster itself (its place, where to meet, how to answer), never
# passed through from the parent's request.
LOCAL_NODE_OWNS = ("master", "nnodes", "node_rank", "local_addr", "local_nodes", "hosts", "output_dir")


def request_argv(request, skip: tuple[str, ...] = LOCAL_NODE_OWNS) -> list[str]:
    """The preflight flags that give ``request`` (a PreflightRequest) back when parsed: every option of this
    command that is a field of the request, from the request's typed values, none kept by hand."""
    from dataclasses import fields

    known = {f.name for f in fields(request)}
    argv: list[str] = []
    for param in preflight.params:
        if not isinstance(param, click.Option) or param.name in skip or param.name not in known:
            continue
        value = getattr(request, param.name)
        if value is None or value is False or value == ():
            continue
        flag = next(o for o in param.opts if o.startswith("--"))
        if param.is_flag:
            argv.append(flag)
        elif param.multiple:
            argv += [a for v in value for a in (flag, str(v))]
        else:
            argv += [flag, _flag_text(value)]
    return argv


def _flag_text(value) -> str:
    """A typed value as its flag gives it: a baseline by its file, a host list comma-joined, else str()."""
    if isinstance(value, dict) and "file" in value:
        return str(value["file"])
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _worker_argv(request):
    """For --local-nodes: the command line of node i, the rest of the request passed through unchanged."""
    passed = request_argv(request)

    def build(i: int, n: int, master: str) -> list[str]:
        from ..cluster.local import node_addr

        # the master's progress (who has joined, what it waits for) is the cluster's; the other nodes stay quiet
        quiet = ["-q"] if i or common.STATE.quiet else []
        return [*quiet, "preflight", "--master", master, "--nnodes", str(n), "--node-rank", str(i),
                "--local-addr", node_addr(i), "--json", "--no-save", *passed]

    return build


@click.command()
@click.option("--only", multiple=True, metavar="NAMES", help="Run only these checks (comma-separated or repeated).")
@click.option("--skip", multiple=True, metavar="NAMES", help="Do not run these checks.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="ddpdoctor.toml with [run] and [checks.NAME] tables.")
@click.option("--set", "sets", multiple=True, metavar="CHECK.KEY=VALUE", help="Override a check option, e.g. clock-skew.warn_ms=200.")
@click.option("--perf", is_flag=True, help="Also run the opt-in measurements (checks declaring opt_in = \"perf\"; "
              "built in: gpu-perf, every GPU's GEMM, memory and host copy bandwidth).")
@click.option("--gpus-per-node", type=click.IntRange(min=0, max=4096), help="GPUs every node must have; fewer is a fail.")
@click.option("--master", metavar="HOST:PORT", envvar="DDPDOCTOR_MASTER",
              help="Where the nodes meet (node rank 0 hosts it). Default: $MASTER_ADDR:$MASTER_PORT with --nnodes.")
@click.option("--nnodes", type=click.IntRange(min=1, max=MAX_NODES), envvar="DDPDOCTOR_NNODES", help="Number of nodes that must join.")
@click.option("--node-rank", type=click.IntRange(min=0, max=MAX_NODES - 1), help="This node's rank (default: from torchrun, SLURM, PBS, MPI, or assigned).")
@click.option("--local-addr", metavar="ADDR", help="Address this node advertises and listens on (like torchrun's --local-addr).")
@click.option("--timeout", type=common.TIMEOUT, default=60.0, show_default=True, help="Seconds to wait for the nodes to meet.")
@click.option("--token", envvar="DDPDOCTOR_TOKEN",
              help="Shared secret that signs every message between nodes (or $DDPDOCTOR_TOKEN): a node with another "
                   "token, and anything else that writes to the port, is rejected and named. Without it the run "
                   "uses its own key file in ~/.ddpdoctor/keys (or --shared-dir) when the nodes share it, else it "
                   "is unauthenticated and says so.")
@click.option("--allow-unauthenticated", is_flag=True,
              help="On the master: accept nodes that cannot prove the run's key (no shared home, no --token). "
                   "Without it a run with a key takes only nodes that prove it, so nobody who merely reaches the "
                   "port can take a node's rank; with it the run is NOT AUTHENTICATED, says so, and prints no fix "
                   "built from another node's values.")
@click.option("--nproc-per-node", type=click.IntRange(min=1, max=4096),
              help="Processes the job will start on this node: with GPUs, each needs one. Nodes may differ "
                   "(torchrun supports it; the world size is the sum).")
@click.option("--rdzv-id", callback=lambda ctx, param, v: _rdzv_id(v), help="Rendezvous id the job will use (compared across nodes).")
@click.option("--code", "code_dir", type=click.Path(file_okay=False), help="Fingerprint the training code in DIR and compare it across nodes.")
@click.option("--shared-dir", type=click.Path(file_okay=False), help="A directory that must be shared by every node.")
@click.option("--hosts", envvar="DDPDOCTOR_HOSTS", callback=lambda ctx, param, v: _hosts(v), metavar="H1,H2,..|@FILE",
              help="The job's hosts in node-rank order (for ssh/pdsh loops): this node's rank is its place in the "
                   "list, the node count its length, and a node that never joins is named by host.")
@click.option("--baseline", type=click.Path(dir_okay=False), callback=lambda ctx, param, v: _baseline(v),
              metavar="FILE",
              help="The cluster.json (or a one-node node-HOST.json) of a known-good run: a node that differs from it "
                   "is named whatever the count (two nodes, a whole cluster that upgraded torch); without it a "
                   "difference is judged by the majority, and a tie names every side. Read on the master.")
@click.option("--local-nodes", type=click.IntRange(min=1, max=64), allow_from_autoenv=False,  # children inherit env
              help="Demo/self-test: start N nodes on this machine (127.0.0.1..N).")
@common.output_options
@common.save_options
@common.run_id_option
@monitoring.exit_codes_option
@monitoring.prometheus_option
def preflight(only, skip, config_path, sets, perf, gpus_per_node, master, nnodes, node_rank, local_addr, timeout,
              token, allow_unauthenticated, nproc_per_node, rdzv_id, code_dir, shared_dir, hosts, baseline, local_nodes, as_json, output_dir,
              report_path, results_dir, no_save, exit_codes, prometheus_dir):
    """Check this machine (no arguments) or a whole cluster (--master HOST:PORT --nnodes N on every node).

    Every finding names the node and prints a fix. Exit 0 passed, 1 a check failed, 2 bad input,
    3 the cluster did not assemble, 5 this node could not verify the master's verdict (no key, no token).

    \b
    Examples:
      ddpdoctor preflight                                        # this machine
      ddpdoctor preflight --master 10.0.0.1:29500 --nnodes 4     # on each of the 4 nodes
      srun --ntasks-per-node=1 ddpdoctor preflight --master $(scontrol show hostnames | head -1):29500
      ddpdoctor preflight --local-nodes 3                        # a 3-node cluster on this machine
      ddpdoctor preflight --skip gpu-perf --set clock-skew.warn_ms=50 --report preflight.html
      ddpdoctor preflight --master node1:29500 --nnodes 2 --baseline good/cluster.json
      ddpdoctor preflight --exit-codes nagios --prometheus-textfile /var/lib/prometheus/node-exporter
    """
    from .. import preflight as engine

    monitoring.check_combination(exit_codes, as_json)
    monitor = exit_codes if exit_codes != "ddpdoctor" else None
    common.STATE.monitor = monitor or common.STATE.monitor
    out_dir = common.ensure_writable_dir(output_dir)
    report_file = common.ensure_writable_file(report_path)
    save = common.saving(results_dir, no_save, out_dir)
    params = click.get_current_context().params
    # Where this node's result will be: the master tells the other nodes (their one line points at its cluster.json)
    written_to = out_dir.resolve() if out_dir else common.default_result_dir(save)
    request = engine.PreflightRequest.from_params(dict(params, output_dir=str(written_to) if written_to else None))
    doc = engine.run(request, quiet=common.STATE.quiet, worker_argv=_worker_argv(request))
    if doc is None:
        common.STATE.monitor_said = True  # nothing to say: local rank 0 says it for the node
        return ExitCode.OK  # a second process on this node (torchrun, mpiexec, srun): local rank 0 speaks for it

    name = result_filename(doc)
    from ..report.console import render_preflight, render_worker_line

    def render(d, con):
        # One summary per cluster: the master prints it; every other node one line (unless -v), so a launcher
        # that merges the nodes' output (srun) shows it once. Every node's JSON still holds everything.
        if d.get("role") == "worker" and not common.STATE.verbose:
            render_worker_line(d, con)
        else:
            render_preflight(d, con, verbose=common.STATE.verbose, quiet=common.STATE.quiet)

    code = common.emit(doc, filename=name, out_dir=out_dir, report_file=report_file, as_json=as_json,
                       render=monitoring.monitor_render(monitor) if monitor else render, save=save)
    monitoring.write_prometheus(doc, prometheus_dir, "preflight")
    return monitoring.monitor_code(monitor, doc) if monitor else code


def result_filename(doc: dict) -> str:
    """The master's document holds every node's facts (cluster.json); the others write their own view beside it."""
    from .. import preflight as engine

    if doc.get("scope") == "cluster":
        return "cluster.json" if doc.get("role") != "worker" else f"node-{doc['this_node']}.json"
    return f"node-{engine.node_name()}.json"


OWNED_BY_RUN_TRAINER = ("master", "nnodes", "node_rank", "local_addr", "nproc_per_node", "rdzv_id", "local_nodes")


def request_from_args(args: list[str], flag: str = "--preflight-args"):
    """Preflight flags given inside another command (run-trainer's --preflight-args), through this command's
    own parser: every preflight flag works, a wrong one is a usage error (exit 2, one line), and the flags
    run-trainer decides itself are refused, not ignored. Returns the typed PreflightRequest."""
    from click.core import ParameterSource

    from ..errors import UsageError
    from ..preflight import PreflightRequest

    if {"--help", "-h"} & set(args):  # click would print preflight's help and end run-trainer with exit 0
        raise UsageError(f"{flag}: --help is not a preflight option to pass on")
    try:
        ctx = preflight.make_context("preflight", list(args))
    except click.ClickException as exc:
        raise UsageError(f"{flag}: {exc.format_message()}") from exc
    given = [name for name in OWNED_BY_RUN_TRAINER if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given:
        raise UsageError(f"{flag}: {', '.join('--' + g.replace('_', '-') for g in given)} "
                         "come from run-trainer's own flags")
    return PreflightRequest.from_params(ctx.params)
