"""Realistic documents of every kind for the report tests and benchmark: a cluster preflight of N nodes
(one odd node, one firewalled link, skewed clocks, a hostile hostname), a full nccl-bench sweep, a failed
trainer run."""
from __future__ import annotations

import random

from ddpdoctor import documents
from ddpdoctor.exports import node_comparable, node_exports
from ddpdoctor.api import Level, Result

EVIL = "<img src=x onerror=alert(1)>"


def with_probe(page: str, script: str) -> str:
    """A report page with a measuring script of a test's own before </body>, allowed by the page's CSP (which
    runs only the report's own script, by its hash) through the probe's hash beside it."""
    import base64
    import hashlib

    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return page.replace("script-src ", f"script-src &#39;sha256-{digest}&#39; ", 1).replace(
        "</body>", f"<script>{script}</script></body>")


def preflight(n: int = 8, evil: bool = True, seed: int = 0, run_id: str | None = None,
              name_format: str = "node{:03d}") -> dict:
    """N nodes; node 2 is the odd one (old torch, clock 1.5 s ahead, unreachable from node 0), node 3 reaches
    the master through another interface, nodes 10-13 warn alike (a foreign process on a GPU), one slow link."""
    rng = random.Random(seed)
    names = [name_format.format(i) for i in range(n)]
    if evil:
        names[1] = EVIL
    odd = names[min(2, n - 1)]
    other_if = names[3] if n > 4 else None
    busy = set(names[10:14])
    nodes, results = {}, []
    for i, name in enumerate(names):
        torch_v = "2.4.0" if name == odd else "2.13.0"
        probes = [{"peer": p, "addr": f"10.0.{j // 250}.{j % 250}:4000", "ok": not (name == names[0] and p == odd),
                   "error_class": "timed out" if (name == names[0] and p == odd) else None,
                   "rtt_ms": None if (name == names[0] and p == odd) else
                   (12.4 if (i == 4 and j == 5) else round(rng.uniform(0.08, 0.35), 3))}
                  for j, p in enumerate(names) if p != name][:64]
        offset = 0.0 if i == 0 else round(rng.gauss(0, 0.25) + (1500 if name == odd else 0), 3)
        bound = 0.0 if i == 0 else round(rng.uniform(0.04, 0.2), 3)
        iface = ("eth0", 1500) if name == other_if else ("ib0", 4092)
        nodes[name] = {"rank": i, "host": name, "addr": f"10.0.{i // 250}.{i % 250}", "facts": {
            "torch-build": {"torch_version": torch_v, "python_version": "3.11.7", "torch_build": "cuda",
                            "cuda_runtime": "12.6", "nccl_version": "2.21.5"},
            "env-vars": {"vars": {"NCCL_DEBUG": "WARN", "HF_TOKEN": "<redacted>",
                                  "WEIRD": "</script><script>alert(2)</script>" if evil and i == 1 else "ok"}},
            "packages": {"packages": ["torch==" + torch_v, "numpy==2.1.0", "click==8.1.7"]},
            "gpu": {"driver_version": "550.54", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8},
            "names": {"route_to_master": {"iface": iface[0], "addr": f"10.0.{i // 250}.{i % 250}", "mtu": iface[1],
                                          "up": True}},
            "clock-skew": {"offset_ms": offset, "bound_ms": bound, "reference": i == 0, "warn_ms": 100.0},
            "mesh": {"probes": probes},
        }, "gather": {}}
        for check in ("torch-build", "packages", "env-vars", "gpu", "network", "names", "resources", "clock-skew",
                      "mesh"):
            level, text, kw = Level.PASS, f"{check} on {name}", {}
            if check == "clock-skew":
                ahead = "ahead of" if offset > 0 else "behind"
                text = f"{name} is {abs(offset):.2f} ms ± {bound:.2f} ms {ahead} the master"
                kw = dict(actual={"offset_ms": offset, "bound_ms": bound}, expected="|offset| <= 100 ms")
                if name == odd:
                    level, kw["fix"] = Level.FAIL, "enable time sync on every node: `timedatectl set-ntp true`"
            elif check == "gpu" and name in busy:
                level, text = Level.WARN, f"{name}: GPU 3 is used by 2 process(es) of another user (pid {4000 + i})"
                kw = dict(fix="stop the other job's processes or pick free GPUs (CUDA_VISIBLE_DEVICES)")
            elif check == "names" and name == other_if:
                level, text = Level.WARN, f"{name} reaches the master through eth0, the other nodes through ib0"
                kw = dict(actual="eth0", expected="ib0", fix="export NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=ib0")
            results.append(Result(check, level, text, [name], **kw))
    results.append(Result("parity", Level.FAIL, f"torch-build torch_version on {odd} differs: '2.4.0' vs '2.13.0'",
                          [odd], actual="2.4.0", expected="2.13.0", fix=f"on {odd}: pip install torch==2.13.0"))
    results.append(Result("mesh", Level.FAIL, f"link {names[0]} -> {odd} timed out", [names[0], odd],
                          actual="timed out", fix="iptables -I INPUT -s <addr> -p tcp -j ACCEPT"))
    for entry in nodes.values():  # as a node writes them today: each check's exports and comparables beside its facts
        entry["exports"], entry["comparable"] = node_exports(entry), node_comparable(entry)
    return documents.preflight_doc(scope="cluster", nodes=nodes, checks=[], results=results, run={"nnodes": n},
                               run_id=run_id)


def bench(world: int = 16, sizes=None, suspects=True, run_id: str | None = None) -> dict:
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
    ops = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv"]
    return documents.envelope("nccl-bench", run_id=run_id,
                          run={"backend": "nccl", "world_size": world, "nnodes": len(nodes),
                               "nproc_per_node": world // len(nodes), "dtype": "float32", "ops": ops,
                               "min_bytes": min(sizes), "max_bytes": max(sizes), "sizes": sizes, "warmup": 5,
                               "iters": 20, "graph": False, "check": True, "min_busbw": None, "wall_s": 41.2},
                          hosts={str(r): nodes[r // 8 % len(nodes)] for r in range(world)}, rows=rows,
                          summary={"avg_busbw_gbs": 100.0, "wrong": 0}, expected={"all_reduce": {"busbw_gbs": 360.0}},
                          localisation=loc, verdict="fail" if suspects else "pass", exit_code=1 if suspects else 0)


def trainer(ranks: int = 4, steps: int = 200, run_id: str | None = None) -> dict:
    """Rank 2 is the slow one (step time and memory above the others); rank 1 fails."""
    slow = min(2, ranks - 1)
    metrics = {str(r): [{"step": s, "loss": 4.0 * 0.99 ** s + 0.01 * r,
                         "tokens_per_s": 50000 + 100 * r - (12000 if r == slow else 0),
                         "step_time_s": 0.0131 if r == slow else 0.0102 + 0.0001 * r,
                         "peak_mem_bytes": (5 << 30) if r == slow else (4 << 30), "attempt": 0, "rank": r}
                        for s in range(1, steps + 1)] for r in range(ranks)}
    rc = {"rank": 1, "local_rank": 1, "host": EVIL, "exit_code": 1, "signal": None, "category": "exception",
          "error_type": "ValueError", "message": "shape <b>bold</b> mismatch", "location": "/w/train.py:12",
          "fix": "fix it", "traceback": "Traceback (most recent call last):\n  File \"/w/train.py\", line 12\n"
                                      "ValueError: </pre><script>alert(3)</script>", "log_tail": ""}
    return documents.envelope("run-trainer", run_id=run_id, config={"nnodes": 1, "nproc_per_node": ranks}, verdict="fail",
                          exit_code=1,
                          restarts=0, metrics=metrics,
                          metrics_summary={"steps": steps, "ranks": ranks, "first_loss": 4.0, "final_loss": 0.5,
                                           "tokens_per_s_mean": 50000.0 * ranks, "step_time_s_mean": 0.011,
                                           "peak_mem_bytes": 5 << 30},
                          checksums_equal=True, root_cause=rc,
                          consequences=[{"rank": 0, "host": "node000", "reason": "peer died", "category": "peer_lost"}])
