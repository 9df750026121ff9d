"""Realistic documents of every kind for the report tests and benchmark: a cluster preflight of N nodes
(one odd node, one firewalled link, skewed clocks, a hostile hostname), a full nccl-bench sweep, a failed
trainer run."""
from __future__ import annotations

import random

from ddpdoctor import model
from ddpdoctor.api import Level, Result

EVIL = "<img src=x onerror=alert(1)>"


def preflight(n: int = 8, evil: bool = True, seed: int = 0) -> dict:
    rng = random.Random(seed)
    names = [f"node{i:03d}" for i in range(n)]
    if evil:
        names[1] = EVIL
    odd = names[min(2, n - 1)]
    nodes, results = {}, []
    for i, name in enumerate(names):
        torch_v = "2.4.0" if name == odd else "2.13.0"
        probes = [{"peer": p, "addr": f"10.0.{j // 250}.{j % 250}:4000", "ok": not (name == names[0] and p == odd),
                   "error_class": "timed out" if (name == names[0] and p == odd) else None, "rtt_ms": 0.2}
                  for j, p in enumerate(names) if p != name][:64]
        nodes[name] = {"rank": i, "host": name, "addr": f"10.0.{i // 250}.{i % 250}", "facts": {
            "torch-build": {"torch_version": torch_v, "python_version": "3.11.7", "torch_build": "cuda",
                            "cuda_runtime": "12.6", "nccl_version": "2.21.5"},
            "env-vars": {"vars": {"NCCL_DEBUG": "WARN", "HF_TOKEN": "<redacted>",
                                  "WEIRD": "</script><script>alert(2)</script>" if evil and i == 1 else "ok"}},
            "packages": {"packages": ["torch==" + torch_v, "numpy==2.1.0", "click==8.1.7"]},
            "gpu": {"driver_version": "550.54", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8},
            "clock-skew": {"offset_ms": 0.0 if i == 0 else rng.gauss(0, 3) + (1500 if name == odd else 0),
                           "bound_ms": rng.uniform(0.05, 0.5)},
            "mesh": {"probes": probes},
        }, "gather": {}}
        for check in ("torch-build", "packages", "env-vars", "gpu", "network", "resources", "clock-skew", "mesh"):
            level = Level.PASS
            if name == odd and check in ("clock-skew",):
                level = Level.FAIL
            results.append(Result(check, level, f"{check} on {name}", [name]))
    results.append(Result("parity", Level.FAIL, f"torch-build torch_version on {odd} differs: '2.4.0' vs '2.13.0'",
                          [odd], actual="2.4.0", expected="2.13.0", fix=f"on {odd}: pip install torch==2.13.0"))
    results.append(Result("mesh", Level.FAIL, f"link {names[0]} -> {odd} timed out", [names[0], odd],
                          actual="timed out", fix="iptables -I INPUT -s <addr> -p tcp -j ACCEPT"))
    return model.preflight_doc(scope="cluster", nodes=nodes, checks=[], results=results, run={"nnodes": n})


def bench(world: int = 16, sizes=None, suspects=True) -> dict:
    sizes = sizes or [1 << k for k in range(10, 31)]
    rows = []
    for op, factor in (("all_reduce", 2 * (world - 1) / world), ("all_gather", (world - 1) / world),
                       ("reduce_scatter", (world - 1) / world), ("broadcast", 1.0), ("all_to_all", (world - 1) / world),
                       ("sendrecv", 1.0)):
        for s in sizes:
            t = 20e-6 + s / 300e9
            form = {"time_us": round(t * 1e6, 2), "time_us_max": round(t * 1.1e6, 2), "algbw_gbs": s / t / 1e9,
                    "busbw_gbs": s / t / 1e9 * factor, "wrong": 0}
            rows.append({"op": op, "group": "all", "size": s, "count": s // 4, "dtype": "float32", "redop": "sum",
                         "root": -1, "out_of_place": form if op != "all_reduce" else None, "in_place": form})
    nodes = [f"node{i:03d}" for i in range(max(2, world // 8))]
    pairs = [{"nodes": [nodes[i], nodes[i + 1]], "busbw_gbs": 40.0 if i else 15.0, "suspect": i == 0}
             for i in range(0, len(nodes) - 1, 2)]
    loc = {"threshold": 0.8, "median_gbs": 40.0, "pairs": pairs, "retests": [],
           "suspects": [{"node": nodes[1], "busbw_gbs": 14.0, "median_gbs": 40.0}] if suspects else []}
    return model.envelope("nccl-bench", run={"backend": "nccl", "world_size": world, "nnodes": len(nodes),
                                             "dtype": "float32", "min_busbw": None},
                          hosts={str(r): nodes[r // 8 % len(nodes)] for r in range(world)}, rows=rows,
                          summary={"avg_busbw_gbs": 100.0, "wrong": 0}, expected={"all_reduce": {"busbw_gbs": 360.0}},
                          localisation=loc, verdict="fail" if suspects else "pass", exit_code=1 if suspects else 0)


def trainer(ranks: int = 4, steps: int = 200) -> dict:
    metrics = {str(r): [{"step": s, "loss": 4.0 * 0.99 ** s + 0.01 * r, "tokens_per_s": 50000 + 100 * r,
                         "step_time_s": 0.01, "peak_mem_bytes": 1 << 30, "attempt": 0} for s in range(1, steps + 1)]
               for r in range(ranks)}
    rc = {"rank": 1, "local_rank": 1, "host": EVIL, "exit_code": 1, "signal": None, "category": "exception",
          "error_type": "ValueError", "message": "shape <b>bold</b> mismatch", "location": "/w/train.py:12",
          "fix": "fix it", "traceback": "Traceback (most recent call last):\n  File \"/w/train.py\", line 12\n"
                                      "ValueError: </pre><script>alert(3)</script>", "log_tail": ""}
    return model.envelope("run-trainer", config={"nnodes": 1, "nproc_per_node": ranks}, verdict="fail", exit_code=1,
                          restarts=0, metrics=metrics, metrics_summary={"steps": steps, "ranks": ranks,
                                                                        "first_loss": 4.0, "final_loss": 0.5},
                          checksums_equal=True, root_cause=rc,
                          consequences=[{"rank": 0, "host": "node000", "reason": "peer died", "category": "peer_lost"}])
