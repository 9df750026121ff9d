"""Benchmark: nccl-bench's harness against a bare torch.distributed loop timing the same op in the same run.

    python tests/benchmarks/bench_nccl_bench.py [--nproc 2] [--backend gloo] [--iters 20]

Starts N ranks with torchrun. At every size from 1 MiB to 64 MiB, each rank times all_reduce both ways,
alternating (harness, bare, harness, bare, ...) and keeping the best of each, so background load hits both
alike. The bare loop: barrier, `iters` back-to-back dist.all_reduce calls, one sync, wall clock.
Target (issue 4): the harness's busbw within 10% of the bare loop's at every size. Exit 0 when met.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20]
REPEATS = 3
TOLERANCE = 0.10


def worker(backend: str, iters: int) -> None:
    import torch
    import torch.distributed as dist

    from ddpdoctor.bench.harness import BenchConfig, Context, measure
    from ddpdoctor.bench.ops import busbw_gbs

    dist.init_process_group(backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else torch.device("cpu")
    ctx = Context(device)
    cfg = BenchConfig(ops=["all_reduce"], sizes=SIZES, warmup=2, iters=iters, check=False, backend=backend)
    rows = []
    for size in SIZES:
        buf = torch.ones(size // 4, dtype=torch.float32, device=device)
        best_h, best_b = 0.0, 0.0
        for _ in range(REPEATS):
            row = measure("all_reduce", size, ctx, cfg)
            best_h = max(best_h, row.in_place["busbw_gbs"])
            for _ in range(2):
                dist.all_reduce(buf)
            ctx.sync()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            ctx.sync()
            per_op = (time.perf_counter() - t0) / iters
            mean = ctx.reduce([per_op], "sum")[0] / n
            best_b = max(best_b, busbw_gbs("all_reduce", size, mean, n))
        rows.append({"size": size, "harness_busbw_gbs": round(best_h, 4), "bare_busbw_gbs": round(best_b, 4),
                     "ratio": round(best_h / best_b, 3) if best_b else None})
    if rank == 0:
        print("RESULT " + json.dumps(rows), flush=True)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.backend, args.iters)
        return 0
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
                          "--master-port", "29531", __file__, "--worker", "--backend", args.backend,
                          "--iters", str(args.iters)], capture_output=True, text=True, timeout=1200)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        print(out.stderr[-3000:])
        return 2
    rows = json.loads(line[len("RESULT "):])
    ok = True
    print(f"{'size':>10} {'harness busbw':>14} {'bare busbw':>11} {'ratio':>6}")
    for r in rows:
        good = r["ratio"] is not None and r["ratio"] >= 1 - TOLERANCE
        ok &= good
        print(f"{r['size']:>10} {r['harness_busbw_gbs']:>14.4f} {r['bare_busbw_gbs']:>11.4f} {r['ratio']:>6.3f}"
              f"{'' if good else '  MISSED'}")
    print("target met: harness within 10% of the bare loop" if ok else "target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
