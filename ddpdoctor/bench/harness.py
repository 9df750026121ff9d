"""One harness for every collective: warm up, check the data, time the loop, reduce the figures across ranks.

Timing as nccl-tests does it: a barrier, ``iters`` back-to-back ops, one synchronisation, the per-op time
averaged across ranks (the slowest rank's time is kept too). On CUDA the loop is timed with CUDA events,
and ``graph`` captures the loop in a CUDA graph so host launch overhead does not hide the link's latency.
Ranks exchange figures as float tensors through the same process group: no pickled objects.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from . import faults
from .ops import DTYPES, OPS, Buffers, algbw_gbs, busbw_gbs

PROGRESS_ENV = "DDPDOCTOR_BENCH_PROGRESS_DIR"  # each rank notes the collective it enters, to name a hung one


@dataclass
class BenchConfig:
    ops: list[str]
    sizes: list[int]
    dtype: str = "float32"
    warmup: int = 5
    iters: int = 20
    check: bool = True
    graph: bool = False
    spread: bool = False
    backend: str = "gloo"
    timeout_s: float = 60.0
    min_busbw: float | None = None
    localise: bool = False
    localise_bytes: int = 16 << 20
    threshold: float = 0.8
    result_path: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Form:
    time_us: float
    time_us_max: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None
    spread: dict | None = None


@dataclass
class Row:
    op: str
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    group: str = "all"
    out_of_place: dict | None = None
    in_place: dict | None = None
    spread: dict | None = None
    extra: dict = field(default_factory=dict)


class Context:
    """What the harness needs from the process group: rank, size, device, a sync and a float all-reduce."""

    def __init__(self, device, group=None):
        import torch.distributed as dist

        self.group = group
        self.global_rank = dist.get_rank()
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.device = device

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def reduce(self, values: list[float], op: str) -> list[float]:
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=self.group)
        return t.tolist()


def _torch_dtype(name: str):
    import torch

    return {"float": torch.float32, "half": torch.float16, "double": torch.float64, "int": torch.int32}.get(
        name, getattr(torch, name))


_ENTERED = [0]


def note_progress(op: str, size: int) -> None:
    """Which collective this rank is about to enter, as a tiny JSON file: after a timeout, the rank whose
    last note is behind the others' is the one that stopped answering (the others waited for it)."""
    where = os.environ.get(PROGRESS_ENV)
    if not where:
        return
    import json
    import socket

    import torch.distributed as dist

    _ENTERED[0] += 1
    rank = dist.get_rank()
    path = os.path.join(where, f"rank{rank}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump({"rank": rank, "host": socket.gethostname(), "op": op, "size": size, "step": _ENTERED[0]}, fh)
    os.replace(path + ".tmp", path)


BEAT_S = 1.0  # how often each rank says it is alive (a file of its own; read only after a failure)


def start_heartbeat(rank: int, host: str):
    """A thread that rewrites ``rank<R>.beat`` (the time) every BEAT_S while this process runs. A rank frozen
    inside a collective (SIGSTOP, Ctrl-Z, a stuck driver) stops it; a rank merely waiting for a peer does not
    (the wait releases the GIL). Returns an Event that stops it; None without a progress dir."""
    import json
    import threading

    where = os.environ.get(PROGRESS_ENV)
    if not where:
        return None
    path, stop = os.path.join(where, f"rank{rank}.beat"), threading.Event()

    def beat() -> None:
        while not stop.is_set():
            try:
                with open(path + ".tmp", "w") as fh:
                    json.dump({"rank": rank, "host": host, "pid": os.getpid(), "t": time.time()}, fh)
                os.replace(path + ".tmp", path)
            except OSError:
                return  # the launcher removed the dir: the run is over
            stop.wait(BEAT_S)

    threading.Thread(target=beat, name="ddpdoctor-bench-beat", daemon=True).start()
    return stop


def time_loop(bufs: Buffers, inplace: bool, ctx: Context, cfg: BenchConfig) -> tuple[float, list[float] | None]:
    """Seconds per op on this rank; with cfg.spread also every op's own time (each synchronised)."""
    import torch
    import torch.distributed as dist

    hook = faults.FAULTS.before_op

    def one():
        hook(ctx.global_rank)
        return bufs.start(inplace, ctx.group)

    for _ in range(cfg.warmup):
        one().wait()
    ctx.sync()
    dist.barrier(group=ctx.group)
    if ctx.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if cfg.graph:
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                with torch.cuda.graph(graph, stream=stream):
                    for _ in range(cfg.iters):
                        bufs.start(inplace, ctx.group)  # captured: the work objects are not waited on
            torch.cuda.synchronize()
            dist.barrier(group=ctx.group)
            start.record()
            graph.replay()
            end.record()
        else:
            start.record()
            works = [one() for _ in range(cfg.iters)]
            for w in works:
                w.wait()
            end.record()
        end.synchronize()
        per_op = start.elapsed_time(end) / 1e3 / cfg.iters
    else:
        t0 = time.perf_counter()
        works = [one() for _ in range(cfg.iters)]
        for w in works:
            w.wait()
        per_op = (time.perf_counter() - t0) / cfg.iters
    samples = None
    if cfg.spread:
        samples = []
        for _ in range(cfg.iters):
            ctx.sync()
            t0 = time.perf_counter()
            one().wait()
            ctx.sync()
            samples.append(time.perf_counter() - t0)
    return per_op, samples


def spread_of(samples: list[float]) -> dict:
    ordered = sorted(samples)
    mean = statistics.fmean(ordered)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    cv = statistics.pstdev(ordered) / mean * 100 if mean > 0 else 0.0
    return {"p50_us": round(statistics.median(ordered) * 1e6, 2), "p99_us": round(p99 * 1e6, 2), "cv_pct": round(cv, 2)}


def measure(op_name: str, size: int, ctx: Context, cfg: BenchConfig, group_label: str = "all") -> Row | None:
    """One row: every form torch offers for this op at this size, checked then timed, figures across ranks."""
    op = OPS[op_name]
    n = ctx.size
    if n < op.min_ranks:
        return None
    elsize = DTYPES[cfg.dtype]
    count = op.count(size, elsize, n)
    if count == 0:
        return None
    nbytes = op.bytes_moved(count, elsize, n)
    bufs = Buffers(op, count, ctx.rank, n, ctx.device, _torch_dtype(cfg.dtype))
    row = Row(op=op_name, size=nbytes, count=count, dtype=cfg.dtype, redop=op.redop, root=op.root, group=group_label)
    faults.FAULTS.before_size(ctx.rank, size)
    note_progress(op_name, nbytes)
    for form in op.forms:
        inplace = form == "in_place"
        wrong = None
        if cfg.check:
            bufs.fill()
            bufs.start(inplace, ctx.group).wait()
            ctx.sync()
            faults.FAULTS.after_check(ctx.rank, bufs.result(inplace))
            wrong = bufs.wrong(inplace)
        per_op, samples = time_loop(bufs, inplace, ctx, cfg)
        total_t, wrong_sum = ctx.reduce([per_op, float(wrong or 0)], "sum")
        (max_t,) = ctx.reduce([per_op], "max")
        total_wrong = int(wrong_sum) if cfg.check else None
        mean_t = total_t / n
        figures = Form(time_us=round(mean_t * 1e6, 2), time_us_max=round(max_t * 1e6, 2),
                       algbw_gbs=round(algbw_gbs(nbytes, mean_t), 4),
                       busbw_gbs=round(busbw_gbs(op_name, nbytes, mean_t, n), 4), wrong=total_wrong)
        if samples is not None:
            spread = spread_of(samples)
            worst = ctx.reduce([spread["p99_us"], spread["cv_pct"]], "max")
            figures.spread = {"p50_us": spread["p50_us"], "p99_us": round(worst[0], 2), "cv_pct": round(worst[1], 2)}
            row.spread = figures.spread
        setattr(row, form, asdict(figures))
    return row


def planned_rows(cfg: BenchConfig, world: int) -> int:
    """How many rows the sweep will measure (measure() skips an op with too few ranks or a size under one
    element): the command's progress counts against it."""
    elsize = DTYPES[cfg.dtype]
    return sum(1 for name in cfg.ops for size in cfg.sizes
               if world >= OPS[name].min_ranks and OPS[name].count(size, elsize, world) > 0)


def sweep(ctx: Context, cfg: BenchConfig, on_row: Callable[[Row], None] | None = None) -> list[Row]:
    rows = []
    for op_name in cfg.ops:
        for size in cfg.sizes:
            row = measure(op_name, size, ctx, cfg)
            if row is None:
                continue
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """Footer figures, as nccl-tests prints them: total #wrong and the average bus bandwidth of every column."""
    bws, wrong, by_op = [], 0, {}
    for r in rows:
        for form in ("out_of_place", "in_place"):
            f = r.get(form)
            if not f:
                continue
            bws.append(f["busbw_gbs"])
            by_op.setdefault(r["op"], []).append(f["busbw_gbs"])
            wrong += f.get("wrong") or 0
    avg = round(statistics.fmean(bws), 4) if bws else 0.0
    return {"avg_busbw_gbs": avg, "wrong": wrong,
            "by_op": {k: {"avg_busbw_gbs": round(statistics.fmean(v), 4)} for k, v in by_op.items()}}
