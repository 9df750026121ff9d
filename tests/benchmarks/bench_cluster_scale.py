"""Benchmark: the multi-node preflight's time to verdict and master memory against the number of nodes.

    python tests/benchmarks/bench_cluster_scale.py processes [--nodes 2,4,8]
    python tests/benchmarks/bench_cluster_scale.py simulate  [--nodes 16,64,128,256] [--in-netns]

processes: N real `ddpdoctor preflight` processes on 127.0.0.1..N (every default check, collective
included), wall clock from the first start to the last exit, including every torch import; the master's
peak RSS sampled every 50 ms. Target: 4 nodes within 8 s.

simulate: N nodes as threads, each a real Node (its own TCPStore client, its own probe listener on
127.0.x.y, the mesh/clock-skew/names/launch-args checks; the collective needs one process per rank and is
left out): the master alone in one process (its peak RSS is measured), the others 32 to a process (one
Python process holding 256 nodes' threads measures the GIL, not the preflight). Interpreter and torch
start-up are excluded: every process imports first, then all start together. Target: 256 nodes
within 20 s; memory growing linearly (per-node slope reported). Name lookups here hit /etc/hosts; a slow
resolver adds its lookup time to the names check of every node (they run in parallel, so about one
lookup's latency, capped at 6 s).
Exit 0 when the targets are met, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

from ddpdoctor.cluster.local import free_port

SIM_CHECKS = "mesh,clock-skew,names,launch-args"
TARGET_4_PROCS_S = 8.0
TARGET_256_SIM_S = 20.0


def run_processes(n: int) -> dict:
    import tempfile

    import psutil

    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out_dir = tempfile.mkdtemp(prefix="ddpd-scale-")
    start = time.perf_counter()
    procs = []
    for rank in range(n):
        argv = [sys.executable, "-m", "ddpdoctor", "-q", "preflight", "--master", f"127.0.0.1:{port}",
                "--nnodes", str(n), "--node-rank", str(rank), "--local-addr", f"127.0.0.{rank + 1}",
                "--timeout", "60", "--output", os.path.join(out_dir, str(rank))]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env=env, start_new_session=True))
    master = psutil.Process(procs[0].pid)
    peak = 0
    while procs[0].poll() is None:
        try:
            peak = max(peak, master.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.05)
    codes = [p.wait(timeout=120) for p in procs]
    wall = time.perf_counter() - start
    with open(os.path.join(out_dir, "0", "cluster.json")) as fh:
        doc = json.load(fh)
    return {"nodes": n, "wall_s": round(wall, 2), "verdict": doc["verdict"], "codes": codes,
            "master_peak_rss_mib": round(peak / 2**20, 1), "timings": doc.get("timings"),
            "not_pass": _kinds(r for r in doc["results"] if r["level"] in ("warn", "fail"))}


NODES_PER_PROCESS = 32


def _node_thread(rank: int, n: int, port: int, plan, results: dict) -> threading.Thread:
    from ddpdoctor.cluster import endpoint as ep
    from ddpdoctor.cluster.join import JoinConfig, run_node

    def body() -> None:
        addr = f"127.0.{rank // 250}.{rank % 250 + 1}"
        cfg = JoinConfig(master=ep.parse_endpoint(f"127.0.0.1:{port}"), nnodes=n, node_rank=rank, local_addr=addr,
                         timeout=60, quiet=True)
        try:
            results[rank] = run_node(cfg, plan)
        except BaseException as exc:  # noqa: BLE001
            results[rank] = exc

    return threading.Thread(target=body, daemon=True)


def simulated_process(role: str, n: int, port: int, first: int, last: int) -> None:
    """One process of the simulation: the master alone (so its memory is its own), or a block of nodes as
    threads. Imports first, says "ready", starts on "go": the timing excludes interpreter and torch start-up."""
    import psutil

    import torch.distributed  # noqa: F401
    from ddpdoctor.preflight import make_plan

    plan = make_plan(only=[SIM_CHECKS], run_flags={"nnodes": n, "timeout": 60})
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    print("ready", flush=True)
    sys.stdin.readline()
    results: dict = {}
    peak = [rss0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    start = time.perf_counter()
    threads = [_node_thread(r, n, port, plan, results) for r in range(first, last)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    wall = time.perf_counter() - start
    stop.set()
    errors = [f"{r}: {v}" for r, v in results.items() if isinstance(v, BaseException)]
    out = {"role": role, "wall_s": round(wall, 2), "errors": errors[:3],
           "rss_base_mib": round(rss0 / 2**20, 1), "rss_growth_mib": round((peak[0] - rss0) / 2**20, 1)}
    master = results.get(0)
    if isinstance(master, dict):
        out.update(verdict=master.get("verdict"), doc_kib=round(len(json.dumps(master, default=str)) / 1024, 1),
                   fails=[r["summary"] for r in master["results"] if r["level"] == "fail"][:3],
                   warns=len([r for r in master["results"] if r["level"] == "warn"]),
                   warn_kinds=_kinds(r for r in master["results"] if r["level"] == "warn"))
    print(json.dumps(out), flush=True)


def _kinds(results) -> dict:
    """Warnings by check and first words, so a benchmark run says what its warnings were about."""
    out: dict = {}
    for r in results:
        key = f"{r['check']}: {' '.join(r['summary'].split()[:3])}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:5])


def run_simulated(n: int) -> dict:
    port = free_port()
    blocks = [(0, 1)] + [(a, min(n, a + NODES_PER_PROCESS)) for a in range(1, n, NODES_PER_PROCESS)]
    procs = []
    for i, (a, b) in enumerate(blocks):
        argv = [sys.executable, __file__, "_sim", "master" if i == 0 else "nodes", str(n), str(port), str(a), str(b)]
        procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, start_new_session=True))
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                return {"nodes": n, "error": "a simulation process failed to start"}
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        master_out = json.loads(procs[0].stdout.readline())
        wall = time.perf_counter() - start
        others = [json.loads(p.stdout.readline() or "{}") for p in procs[1:]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
    errors = master_out.get("errors", []) + [e for o in others for e in o.get("errors", [])]
    return {"nodes": n, "processes": len(procs), "wall_s": round(wall, 2), "verdict": master_out.get("verdict"),
            "master_rss_growth_mib": master_out.get("rss_growth_mib"), "master_doc_kib": master_out.get("doc_kib"),
            "fails": master_out.get("fails"), "warns": master_out.get("warns"),
            "warn_kinds": master_out.get("warn_kinds"), "errors": errors[:3]}


def message_costs(repeat: int = 2000) -> list[dict]:
    """What sealing and verifying one message costs (HMAC, JSON, schema): an identity, and a node's facts
    as a real 3-node run publishes them (read back from a --local-nodes document)."""
    from ddpdoctor.cluster import messages as mbx
    from ddpdoctor.cluster.envelope import open_envelope, seal
    from ddpdoctor.cluster.messages import Slot

    ident = {"rank": 1, "claim": 1, "host": "node001", "fqdn": "node001.cluster", "addr": "10.0.0.2",
             "probe_port": 40000, "pid": 1234, "boot_id": "0" * 36, "tool_version": "0.1.0", "launcher": "slurm",
             "fresh": "ab" * 16, "launch": {"nnodes": 256, "nproc_per_node": 8, "rdzv_id": "job1",
                                            "endpoint": "10.0.0.1:29500"}, "checks": ["mesh"] * 17}
    facts = {"facts": _sample_facts(), "gather": {"mesh": {"status": "ok", "seconds": 0.1}}}
    rows = []
    for name, kind, key, body in (("ident", "ident", "ident/1/1", ident), ("facts", "facts", "facts/1.1", facts)):
        frame = seal(body, token="secret", run="ab" * 16, key=key, sender=Slot(1, 1))
        start = time.perf_counter()
        for _ in range(repeat):
            seal(body, token="secret", run="ab" * 16, key=key, sender=Slot(1, 1))
        sealed_us = (time.perf_counter() - start) / repeat * 1e6
        start = time.perf_counter()
        for _ in range(repeat):
            _, opened = open_envelope(frame, token="secret", run="ab" * 16, key=key, sender=Slot(1, 1),
                                      from_master=False)
            mbx.KINDS[kind].check(opened, {"nnodes": 256, "max_nodes": 16384, "slot": Slot(1, 1)})
        verify_us = (time.perf_counter() - start) / repeat * 1e6
        rows.append({"message": name, "bytes": len(frame), "seal_us": round(sealed_us, 1),
                     "verify_us": round(verify_us, 1)})
    return rows


def _sample_facts() -> dict:
    """One node's facts from a real local run (every default check), so the size is realistic."""
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "ddpdoctor", "-q", "preflight", "--json", "--output", out],
                       capture_output=True, timeout=120)
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as fh:
                doc = json.load(fh)
            return next(iter(doc["nodes"].values()))["facts"]
    return {}


def run_in_netns(args: list[str]) -> int:
    """Re-run this benchmark in a fresh network namespace with only loopback: name lookups that would go to
    a DNS server fail at once there, so the figures are the preflight's own, not the resolver's."""
    name = f"ddpd-bench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        return subprocess.run(["ip", "netns", "exec", name, sys.executable, __file__, *args]).returncode
    finally:
        subprocess.run(["ip", "netns", "del", name])


def main() -> int:
    if "--in-netns" in sys.argv:
        return run_in_netns([a for a in sys.argv[1:] if a != "--in-netns"])
    if len(sys.argv) == 7 and sys.argv[1] == "_sim":
        simulated_process(sys.argv[2], *map(int, sys.argv[3:]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["processes", "simulate", "messages"])
    ap.add_argument("--nodes", help="comma-separated node counts")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    ok = True
    rows = []
    if args.mode == "messages":
        rows = message_costs()
        for row in rows:
            print(json.dumps(row))
    elif args.mode == "processes":
        for n in [int(x) for x in (args.nodes or "2,4,8").split(",")]:
            row = run_processes(n)
            rows.append(row)
            print(json.dumps(row))
            if n == 4 and row["wall_s"] > TARGET_4_PROCS_S:
                ok = False
    else:
        for n in [int(x) for x in (args.nodes or "16,64,128,256").split(",")]:
            row = run_simulated(n)
            rows.append(row)
            print(json.dumps(row))
            if n == 256 and (row.get("wall_s") or 1e9) > TARGET_256_SIM_S:
                ok = False
        good = [r for r in rows if r.get("master_rss_growth_mib") is not None]
        if len(good) >= 2:
            slope = ((good[-1]["master_rss_growth_mib"] - good[0]["master_rss_growth_mib"])
                     / (good[-1]["nodes"] - good[0]["nodes"]))
            print(f"master memory slope: {slope * 1024:.0f} KiB per node")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(rows, fh, indent=1)
    print("targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
