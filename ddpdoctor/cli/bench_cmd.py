"""`ddpdoctor nccl-bench`: parse flags into a BenchConfig, start the ranks, render rank 0's document."""
from __future__ import annotations

import os
import shutil
import signal
import tempfile

import click

from ..errors import UsageError
from ..exitcodes import ExitCode
from ..inputs import MAX_NODES
from ..numbers import parse_int
from . import common, monitoring

OP_NAMES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv")
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
# Bounds of the counts (the input policy: every number bounded). A million timed iterations of the smallest
# message is minutes; 10**30 was a 3 GB list of timings before the first op.
MAX_ITERS = 1_000_000
MAX_NPROC = 1024  # local ranks on one node


@click.command("nccl-bench")
@click.option("-b", "--min-bytes", default="8M", show_default=True, help="Smallest message (K/M/G suffixes).")
@click.option("-e", "--max-bytes", default="64M", show_default=True, help="Largest message.")
@click.option("-f", "--step-factor", type=common.FiniteFloat(0, 1024), default=2.0, show_default=True, help="Multiply the size by this each step.")
@click.option("-d", "--dtype", default="float32", show_default=True, help=f"One of {', '.join(DTYPE_NAMES)}.")
@click.option("-w", "--warmup", type=click.IntRange(min=0, max=MAX_ITERS), default=5, show_default=True,
              help="Untimed iterations per size first (nccl-tests -w).")
@click.option("-n", "--iters", type=click.IntRange(min=1, max=MAX_ITERS), default=20, show_default=True,
              help="Timed iterations per size (nccl-tests -n).")
@click.option("-c", "--check/--no-check", default=True,
              help="Verify every result and count wrong elements, #wrong (default: on; nccl-tests -c).")
@click.option("--op", "ops", default="all_reduce", show_default=True,
              help=f"Comma-separated collectives, or 'all': {', '.join(OP_NAMES)}.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="auto: NCCL where GPUs are present, gloo on CPU.")
@click.option("--nproc-per-node", "--nproc", "nproc", type=click.IntRange(min=1, max=MAX_NPROC),
              help="Ranks to start on this node (default: one per GPU, 2 on CPU).")
@click.option("--master", metavar="HOST:PORT", envvar="DDPDOCTOR_MASTER", help="c10d rendezvous endpoint across nodes.")
@click.option("--nnodes", type=click.IntRange(min=1, max=MAX_NODES), default=1, show_default=True,
              help="Nodes taking part; run the same command on each (with --master).")
@click.option("--node-rank", type=click.IntRange(min=0, max=MAX_NODES - 1), help="This node's rank (default: assigned by the rendezvous).")
@click.option("--graph", is_flag=True, help="Capture the timed loop in a CUDA graph (NCCL only), like nccl-tests -G.")
@click.option("--min-busbw", type=common.FiniteFloat(0, 1e6), help="Fail when the average bus bandwidth (GB/s) is below this.")
@click.option("--spread", is_flag=True, help="Also time every iteration: p50, p99 and cv%.")
@click.option("--localise", is_flag=True, help="Intra- vs inter-node figures and the slow-node hunt by node pairs.")
@click.option("--localise-size", default="16M", show_default=True, help="Message size of the --localise runs.")
@click.option("--threshold", type=common.FiniteFloat(0, 1), default=0.8, show_default=True,
              help="With --localise: a pair or node under this fraction of the median is slow.")
@click.option("--timeout", type=common.TIMEOUT, default=120.0, show_default=True,
              help="Seconds any collective may take before the run is abandoned.")
@common.output_options
@common.save_options
@common.run_id_option
@monitoring.prometheus_option
def nccl_bench(min_bytes, max_bytes, step_factor, dtype, warmup, iters, check, ops, backend, nproc, master, nnodes,
               node_rank, graph, min_busbw, spread, localise, localise_size, threshold, timeout, as_json, output_dir, report_path,
               results_dir, no_save, prometheus_dir):
    """Collective benchmark with nccl-tests' algbw/busbw definitions, data checks and slow-node localisation.

    \b
    Examples:
      ddpdoctor nccl-bench                                   # all_reduce 8M..64M on this node's GPUs (gloo on CPU)
      ddpdoctor nccl-bench --op all -b 1K -e 1G --spread     # every collective, a wide sweep, p50/p99
      ddpdoctor nccl-bench --nnodes 2 --master node0:29600 --localise   # on both nodes: find the slow one
    """
    from ..bench.harness import BenchConfig
    from ..bench.spawn import LaunchPlan, under_launcher
    from ..bench.sizes import parse_size, sweep

    out_dir = common.ensure_writable_dir(output_dir)
    report_file = common.ensure_writable_file(report_path)
    names = list(OP_NAMES) if ops.strip() == "all" else [o.strip() for o in ops.split(",") if o.strip()]
    unknown = [o for o in names if o not in OP_NAMES]
    if unknown or not names:
        raise UsageError(f"--op {ops!r}: unknown collective {', '.join(unknown) or '(none)'}; known: {', '.join(OP_NAMES)}")
    if dtype not in DTYPE_NAMES:
        raise UsageError(f"-d/--dtype {dtype!r}: unknown; known: {', '.join(DTYPE_NAMES)}")
    sizes = sweep(parse_size(min_bytes, "-b/--min-bytes"), parse_size(max_bytes, "-e/--max-bytes"), step_factor)
    # torch is imported (~2 s) only when the answer matters: an explicit --backend gloo needs no CUDA probe.
    from ..devices import cuda_available

    cuda = cuda_available() if backend != "gloo" or graph else False
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise UsageError("--backend nccl needs CUDA GPUs, and torch sees none here (use --backend gloo)")
    if graph and backend != "nccl":
        raise UsageError("--graph captures the loop in a CUDA graph: it needs CUDA and the NCCL backend")
    launched = under_launcher()
    if launched:
        _launcher_env(os.environ, given=bool(nproc or master))
    if nnodes > 1 and not master:
        raise UsageError("--nnodes above 1 needs --master HOST:PORT (the same on every node)")
    if master:
        master = _endpoint(master)
    if nproc is None:
        nproc = _gpu_count() if backend == "nccl" else 2
    _measures_something(names, sizes, dtype, int(os.environ["WORLD_SIZE"]) if launched else nproc * nnodes,
                        speaks=not launched or os.environ["RANK"] == "0")
    localise_bytes = parse_size(localise_size, "--localise-size")
    plan = LaunchPlan(nproc=nproc, nnodes=nnodes, master=master, node_rank=node_rank)
    result_dir = tempfile.mkdtemp(prefix="ddpdoctor-bench-")
    try:
        cfg = BenchConfig(ops=names, sizes=sizes, dtype=dtype, warmup=warmup, iters=iters, check=check, graph=graph,
                          spread=spread, backend=backend, timeout_s=timeout, min_busbw=min_busbw, localise=localise,
                          localise_bytes=localise_bytes, threshold=threshold,
                          result_path=os.path.join(result_dir, "bench.json"))
        return _run(cfg, launched, plan, out_dir=out_dir, report_file=report_file, as_json=as_json,
                    save=common.saving(results_dir, no_save, out_dir), prometheus_dir=prometheus_dir)
    finally:
        # Rank 0's result has been read (and written to --output) by now: the temp dir never outlives the command.
        shutil.rmtree(result_dir, ignore_errors=True)


def _run(cfg, launched: bool, plan, *, out_dir, report_file, as_json: bool, save=None, prometheus_dir=None) -> int:
    """Run the ranks (here under a launcher, else through torch's launcher), printing each row as rank 0
    measures it, then show rank 0's document. Stopped by a signal, the rows measured so far are the result."""
    from .. import documents
    from ..bench.feed import FeedReader, feed_path
    from ..report.console_bench import LiveRows
    from ..bench.spawn import BenchFailed

    feed = FeedReader(feed_path(cfg.result_path))
    live = None if as_json else LiveRows(common.console(), bar=not common.STATE.quiet)
    emitting = dict(filename="nccl-bench.json", out_dir=out_dir, report_file=report_file, as_json=as_json, save=save)
    try:
        with _Follow(feed, live):
            _start(cfg, launched, plan)
    except KeyboardInterrupt as exc:  # Ctrl-C; lifetime.Terminated (SIGTERM, SIGHUP) is one too
        signum = getattr(exc, "signum", signal.SIGINT)
        _keep_measured(feed, live, emitting, 128 + signum, interrupted=signal.Signals(signum).name)
        raise
    except BenchFailed as exc:  # a rank died or stopped answering: its line follows (the one error policy)
        _keep_measured(feed, live, emitting, ExitCode.FAIL, error=str(exc))
        raise
    if not os.path.exists(cfg.result_path) or (launched and int(os.environ.get("RANK", "0")) != 0):
        return ExitCode.OK  # a node or rank other than global rank 0, which speaks for the job

    # The rows shown while they were measured are not printed again: the rest of the document and its footer
    doc = documents.load(cfg.result_path)
    code = common.emit(doc, render=lambda d, _: live.table.rest(d), **emitting)
    monitoring.write_prometheus(doc, prometheus_dir, "nccl-bench")
    return code


def _start(cfg, launched: bool, plan) -> None:
    from .. import documents
    from ..bench.spawn import run_in_this_process, start_ranks

    if launched:
        run_in_this_process(cfg.to_json())
    else:
        # torch's launcher gives the ranks its own rendezvous id (TORCHELASTIC_RUN_ID, which the document would
        # carry): pin the workflow's id first, so the result lands under it like preflight's and run-trainer's
        os.environ["DDPDOCTOR_RUN_ID"] = documents.new_run_id()
        start_ranks(cfg.to_json(), plan)


class _Follow:
    """While the ranks run, a thread hands the rows rank 0 writes to the terminal view (every 0.2 s); on the
    way out, the last ones, then the progress bar is gone."""

    def __init__(self, feed, live):
        import threading

        self.feed, self.live = feed, live
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="ddpdoctor-bench-rows", daemon=True)

    def __enter__(self):
        if self.live is not None:
            self.thread.start()
        return self

    def _follow(self) -> None:
        while not self.done.wait(0.2):
            self.live.feed(self.feed.poll())

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self.live is not None:
            self.thread.join(5)
            self.live.feed(self.feed.poll())
            self.live.close()


def _keep_measured(feed, live, emitting: dict, exit_code: int, interrupted: str | None = None,
                   error: str | None = None) -> None:
    """A sweep cut short by a signal or a failed rank: the rows rank 0 finished before it become the result
    (shown, saved where the whole one would have been), then the command ends as the signal or the failure
    says. Nothing measured: nothing kept."""
    from ..bench.worker import interrupted_document

    feed.poll()
    if feed.header is None or (error and not feed.rows):
        return
    doc = interrupted_document(feed.header, feed.rows, interrupted, exit_code, error=error)
    common.emit(doc, render=lambda d, _: live.table.rest(d), **emitting)  # live is None only with --json


def _launcher_env(env, given: bool) -> None:
    """Under a launcher (RANK and WORLD_SIZE set) it decides the ranks, and they meet through env:// (what
    torchrun sets): a variable missing or not a number (RANK and WORLD_SIZE left over in a shell, a launcher
    that sets no MASTER_ADDR) is one line naming it, not torch's ValueError from inside init_process_group."""
    if given:
        raise UsageError("running under a launcher (RANK/WORLD_SIZE set): it decides --nproc and --master")
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not env.get(v)]
    bad = [f"{v}={env.get(v)!r}" for v in ("RANK", "WORLD_SIZE") if parse_int(env.get(v, ""), strip=False) is None]
    if env.get("MASTER_PORT") and parse_int(env["MASTER_PORT"], lo=1, hi=65535, strip=False) is None:
        bad.append(f"MASTER_PORT={env['MASTER_PORT']!r}")
    if env.get("MASTER_ADDR"):
        from ..cluster.endpoint import host_like

        addr = env["MASTER_ADDR"]
        if not host_like(addr.strip("[]")):  # torch would retry a name the resolver refuses until its timeout
            bad.append(f"MASTER_ADDR={addr[:40]!r}{'...' if len(addr) > 40 else ''} (not an IP address or host name)")
    if missing or bad:
        raise UsageError(f"RANK and WORLD_SIZE are set, so this process runs as one rank of a launcher's job, but "
                         f"{', '.join(missing + bad)} {'is' if len(missing + bad) == 1 else 'are'} "
                         f"{'missing' if missing and not bad else 'not usable'}: start it with torchrun (which sets "
                         f"them all), or unset RANK WORLD_SIZE to let nccl-bench start its own ranks")


def _measures_something(names: list[str], sizes: list[int], dtype: str, world: int, speaks: bool) -> None:
    """A sweep where no op measures anything (its sizes under one element, too few ranks) is a usage error
    before any rank starts, not an empty table with "0 OK" and exit 0; an op that measures nothing beside others
    that do (`--op all` on one rank: no sendrecv) is one warning line (``speaks``: this process is rank 0).
    ``world`` is this command's world size (every node assumed to start as many ranks as this one)."""
    from ..bench.ops import unmeasurable

    why = unmeasurable(names, sizes, dtype, world)
    if len(why) == len(names):
        raise UsageError(f"nothing to measure: {'; '.join(why)}")
    if why and speaks and not common.STATE.quiet:
        common.warn_line(f"skipped: {'; '.join(why)}")


def _endpoint(text: str) -> str:
    """--master through the one endpoint parser (preflight's), so a bad one is exit 2, never a hang in c10d."""
    from ..cluster.endpoint import parse_endpoint

    parse_endpoint(text)  # HOST:PORT or [IPv6]:PORT, port 1-65535: a UsageError otherwise
    return text.strip()


def _gpu_count() -> int:
    from ..lifetime import import_held

    torch = import_held("torch")

    return max(1, torch.cuda.device_count())
