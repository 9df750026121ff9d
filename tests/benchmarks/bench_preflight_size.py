"""Benchmark: what a cluster preflight keeps (cluster.json) and its HTML report, against the number of nodes.

    python tests/benchmarks/bench_preflight_size.py [--nodes 4,16,32,64,256] [--slow-lookups]

One real 4-node preflight (`--local-nodes 4`, every default check) gives each node's facts; the document of N
nodes is then built from them as the master builds it (no N processes): each node's facts copied, the per-peer
ones made for the N-node roster as the checks gather them (the mesh's probes and links, the names check's lookups
and peer list: every other node up to 64 nodes, ring neighbours plus random peers above), then the real
comparisons (runner.compare_all with the default plan), documents.preflight_doc and the HTML report.
--slow-lookups: every lookup took 6.00 s (a loaded node's resolver at load 8-12: 883 of 1,379 results of a real
32-node run were that warning once per pair). Targets (issue 55 U6): the HTML report of 64 nodes under 2 MB, of
256 under 5 MB (met); cluster.json is printed beside it and is not yet within them (the per-peer facts of a full
mesh, every probe and lookup, grow with the square of the nodes up to 64). Exit 0 when the report's are met.
"""
from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TARGETS_MB = {64: 2.0, 256: 5.0}


def real_template() -> dict:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "ddpdoctor", "preflight", "--local-nodes", "4", "--output", out, "-q",
                        "--no-save"], check=False, timeout=300, capture_output=True)
        return json.loads((Path(out) / "cluster.json").read_text())


def scaled_nodes(template: dict, n: int, slow: bool) -> dict:
    from ddpdoctor.cluster.view import FULL_MESH_MAX, RANDOM_PEERS

    import random

    first = next(iter(template["nodes"].values()))
    names = [f"node{i:03d}" for i in range(n)]
    addrs = {name: f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i, name in enumerate(names)}
    nodes = {}
    for i, name in enumerate(names):
        if n <= FULL_MESH_MAX:
            peers = [p for p in names if p != name]
        else:
            chosen = {(i + 1) % n, (i - 1) % n}
            pool = [j for j in range(n) if j != i and j not in chosen]
            chosen.update(random.Random(i).sample(pool, min(RANDOM_PEERS, len(pool))))
            peers = [names[j] for j in sorted(chosen)]
        entry = copy.deepcopy(first)
        entry.update(rank=i, host=name, addr=addrs[name], fqdn=f"{name}.cluster")
        facts = entry["facts"]
        probes = [{"peer": p, "addr": f"{addrs[p]}:40000", "ok": True, "error_class": None, "rtt_ms": 0.2 + j / 1000,
                   "message": ""} for j, p in enumerate(peers)]
        facts["mesh"] = dict(facts["mesh"], probes=probes, peers_total=n - 1, addr=addrs[name])
        entry["exports"]["mesh"] = {"links": [{k: pr[k] for k in ("peer", "ok", "rtt_ms", "error_class")}
                                              for pr in probes]}
        secs = 6.0 if slow else 0.0004
        lookups = [{"kind": "reverse", "query": addrs[p], "answer": f"{p}.cluster", "error": None, "seconds": secs,
                    "node": p} for p in [*peers, names[0], name]]
        lookups += [{"kind": "forward", "query": p, "answer": [addrs[p]], "error": None, "seconds": secs, "node": p}
                    for p in [*peers, names[0], name]]
        facts["names"] = dict({k: v for k, v in facts["names"].items() if k != "peer_addrs"}, hostname=name, fqdn=f"{name}.cluster", advertised=addrs[name],
                              unique_hostnames=True, lookups=lookups,
                              hostname_lookup={"kind": "forward", "query": name, "answer": [addrs[name]],
                                               "error": None, "seconds": 0.0003})
        facts["launch-args"] = dict(facts["launch-args"], rank=i, launch=dict(facts["launch-args"]["launch"], nnodes=n))
        if isinstance(facts.get("collective"), dict):
            facts["collective"] = dict(facts["collective"], world_size=n)
        nodes[name] = entry
    return nodes


def build(template: dict, n: int, slow: bool) -> tuple[dict, int]:
    from ddpdoctor import documents, runner
    from ddpdoctor.preflight import make_plan

    nodes = scaled_nodes(template, n, slow)
    run = dict(template["run"], nnodes=n)
    plan = make_plan(run_flags=run)
    results = runner.compare_all(plan.checks, nodes, plan.opts_by_check, run=dict(plan.run, **run))
    doc = documents.preflight_doc(scope="cluster", nodes=nodes, checks=[lc.describe() for lc in plan.checks],
                                  results=results, run=run, run_id="size-bench")
    return doc, len(results)


def main() -> int:
    from ddpdoctor.report import html

    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="4,16,32,64,256")
    ap.add_argument("--slow-lookups", action="store_true")
    args = ap.parse_args()
    template = real_template()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.nodes.split(",")):
            doc, count = build(template, n, args.slow_lookups)
            js = Path(tmp) / f"cluster-{n}.json"
            documents_size = len(json.dumps(doc, indent=1, default=str))
            js.write_text(json.dumps(doc, indent=1, default=str))
            page = Path(tmp) / f"report-{n}.html"
            html.write_html([doc], page)
            mb_json, mb_html = documents_size / 2**20, page.stat().st_size / 2**20
            target = TARGETS_MB.get(n)
            met = target is None or mb_html < target
            ok &= met
            print(f"{n:4d} nodes: {count:6d} results, cluster.json {mb_json:6.2f} MB, report {mb_html:6.2f} MB"
                  + (f" (report target < {target} MB: {'met' if met else 'MISSED'})" if target else ""), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
