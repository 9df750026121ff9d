"""launch-args: the launch every node intends (nnodes, processes per node, rendezvous id and endpoint) agrees,
and no two nodes claim one node rank. Differences hang a job until the rendezvous times out."""
from __future__ import annotations

from ddpdoctor.api import Check, odd_ones

FIELDS = {
    "nnodes": "--nnodes",
    "nproc_per_node": "--nproc-per-node",
    "rdzv_id": "--rdzv-id",
    "endpoint": "--master / --rdzv-endpoint",
}


class LaunchArgsCheck(Check):
    name = "launch-args"
    description = "Launch arguments (nnodes, nproc per node, rendezvous id/endpoint) equal on every node; ranks unique"
    phase = "cluster"

    def gather(self, ctx) -> dict:
        me = ctx.cluster.me
        return {"rank": me["rank"], "claim": me["claim"], "launch": me.get("launch", {}), "launcher": me.get("launcher")}

    def compare(self, facts_by_node, opts):
        out = []
        for key, flag in FIELDS.items():
            values = {n: (f.get("launch") or {}).get(key) for n, f in facts_by_node.items()}
            out += odd_ones(values, lambda node, value, common, flag=flag: self.fail(
                f"{node} intends {flag} {_shown(value)}, the other nodes {_shown(common)}", [node],
                actual=value, expected=common,
                fix=f"launch every node with the same {flag} {_shown(common)} (use the scheduler's job id as the "
                    f"rendezvous id, never $RANDOM per node)"), ignore_missing=False)
        by_rank: dict[int, list[str]] = {}
        for node, f in facts_by_node.items():
            by_rank.setdefault(f.get("rank"), []).append(node)
        for rank, nodes in sorted(by_rank.items(), key=lambda kv: (kv[0] is None, kv[0])):
            if len(nodes) > 1:
                out.append(self.fail(
                    f"{len(nodes)} nodes claim node rank {rank}: {', '.join(sorted(nodes))}", sorted(nodes),
                    actual=sorted(nodes), expected="one node per rank",
                    fix="give each node its own --node-rank (0..N-1), or omit it everywhere to let ranks be assigned",
                ))
        if not out:
            sample = next(iter(facts_by_node.values())).get("launch", {})
            out.append(self.passed(
                f"{len(facts_by_node)} node(s) agree: " + ", ".join(f"{flag} {_shown(sample.get(k))}"
                                                                    for k, flag in FIELDS.items()),
                sorted(facts_by_node)))
        return out


def _shown(value) -> str:
    return "not set" if value is None else str(value)
