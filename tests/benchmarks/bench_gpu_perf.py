"""Benchmark: gpu-perf's figures against a plain torch loop measured in the same run.

    python tests/benchmarks/bench_gpu_perf.py [--json OUT.json] [--gemm-n 8192] [--copy-mib 1024]

1. Times ``ddpdoctor_checks.support.gpuperf.measure_node`` over every visible GPU, as the gpu-perf check runs it (one worker
   per GPU, all at once): the node's wall time must stay under 15 s.
2. Then, in this process, one GPU at a time, the plainest loop: warm up, synchronize, N back-to-back ops,
   synchronize, wall clock -> TFLOP/s and GB/s (read + written).
3. Per GPU, gpu-perf / plain must be >= 0.97 for GEMM and copy (the check must not under-report).
H2D is reported for information (gpu-perf serialises it across GPUs; the plain loop is also one at a time).
Exit 0 when every target is met, 1 when one is missed, 2 without CUDA.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

TARGET_RATIO = 0.97
TARGET_WALL_S = 15.0


def plain_gemm(device: int, n: int, iters: int = 50) -> float:
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(5):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize(device)
    return 2.0 * n ** 3 * iters / (time.perf_counter() - t0) / 1e12


def plain_copy(device: int, nbytes: int, iters: int = 50) -> float:
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    return 2.0 * nbytes * iters / (time.perf_counter() - t0) / 1e9


def plain_h2d(device: int, nbytes: int, iters: int = 20) -> float:
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    for _ in range(3):
        dst.copy_(host, non_blocking=True)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        dst.copy_(host, non_blocking=True)
    torch.cuda.synchronize(device)
    return nbytes * iters / (time.perf_counter() - t0) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--h2d-mib", type=int, default=256)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark", file=sys.stderr)
        return 2
    from ddpdoctor_checks.support.gpuperf import PerfConfig, measure_node

    devices = list(range(torch.cuda.device_count()))
    cfg = PerfConfig(gemm_n=args.gemm_n, copy_bytes=args.copy_mib << 20, h2d_bytes=args.h2d_mib << 20)
    t0 = time.perf_counter()
    checked = measure_node(devices, cfg, timeout_s=120)
    wall = time.perf_counter() - t0

    rows, ok = [], wall < TARGET_WALL_S
    for g in checked:
        d = g["index"]
        if g.get("error"):
            rows.append({"index": d, "error": g["error"]})
            ok = False
            continue
        torch.cuda.set_device(d)
        plain = {"gemm_tflops": plain_gemm(d, args.gemm_n), "copy_gbps": plain_copy(d, cfg.copy_bytes),
                 "h2d_gbps": plain_h2d(d, cfg.h2d_bytes)}
        torch.cuda.empty_cache()
        row = {"index": d, "name": g.get("name"), "uuid": g.get("uuid")}
        for key in ("gemm_tflops", "copy_gbps", "h2d_gbps"):
            row[key] = {"gpu_perf": g[key], "plain": round(plain[key], 2), "ratio": round(g[key] / plain[key], 4)}
        ok = ok and row["gemm_tflops"]["ratio"] >= TARGET_RATIO and row["copy_gbps"]["ratio"] >= TARGET_RATIO
        rows.append(row)

    print(f"gpu-perf over {len(devices)} GPU(s): {wall:.2f} s wall (target < {TARGET_WALL_S:g} s)")
    print(f"{'gpu':>3}  {'metric':<12} {'gpu-perf':>10} {'plain loop':>11} {'ratio':>7}")
    for row in rows:
        if "error" in row:
            print(f"{row['index']:>3}  ERROR {row['error']}")
            continue
        for key in ("gemm_tflops", "copy_gbps", "h2d_gbps"):
            r = row[key]
            flag = "" if key == "h2d_gbps" or r["ratio"] >= TARGET_RATIO else "  < target"
            print(f"{row['index']:>3}  {key:<12} {r['gpu_perf']:>10.2f} {r['plain']:>11.2f} {r['ratio']:>7.3f}{flag}")
    print("PASS" if ok else "FAIL")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"wall_s": round(wall, 3), "target_ratio": TARGET_RATIO, "target_wall_s": TARGET_WALL_S,
                       "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "gpus": rows, "ok": ok},
                      fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
