"""launch-args: the launch every node intends agrees where it must (nnodes, rendezvous id and endpoint), and no
two nodes claim one node rank. Those differences hang a job until the rendezvous times out.

Processes per node may differ: torchrun supports heterogeneous --nproc-per-node (the PyTorch multinode
tutorial runs 4 GPUs on one machine and 2 on another); the world size is their sum. That passes, with a
note: the training code must take its GPU from LOCAL_RANK and its rank from RANK, never compute ranks as
node_rank × nproc_per_node. Whether a node has a GPU for each of its processes is the gpu check's judgement,
on that node. With two nodes, or any tie, a difference names every side and picks none."""
from __future__ import annotations

from ddpdoctor.api import Check, Split, odd_ones, split

# What must be the same on every node: the field of the node's launch and the flag that sets it.
AGREE = {
    "nnodes": "--nnodes",
    "rdzv_id": "--rdzv-id",
    "endpoint": "--master / --rdzv-endpoint",
}
NPROC = ("nproc_per_node", "--nproc-per-node")
RDZV_FIX = " (use the scheduler's job id as the rendezvous id, never $RANDOM per node)"


class LaunchArgsCheck(Check):
    name = "launch-args"
    description = ("Launch arguments (nnodes, rendezvous id/endpoint) equal on every node, processes per node "
                   "may differ; ranks unique")
    phase = "cluster"

    def gather(self, ctx) -> dict:
        me = ctx.cluster.me
        return {"rank": me["rank"], "claim": me["claim"], "launch": me.get("launch", {}), "launcher": me.get("launcher")}

    def compare(self, facts_by_node, opts):
        out = []
        for key, flag in AGREE.items():
            values = {n: (f.get("launch") or {}).get(key) for n, f in facts_by_node.items()}
            out += odd_ones(values, lambda node, value, common, flag=flag: self.fail(
                f"{node} intends {flag} {_shown(value)}, the other nodes {_shown(common)}", [node],
                actual=value, expected=common,
                fix=f"launch every node with the same {flag} {_shown(common)}{RDZV_FIX if 'rdzv' in flag else ''}"),
                ignore_missing=False, tie=lambda s, flag=flag: [self._tie(flag, s)])
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
            agreed = [f"{flag} {_shown(sample.get(k))}" for k, flag in AGREE.items()]
            nproc, details = processes_per_node(facts_by_node)
            if details:  # heterogeneous: the note after what agrees
                summary = f"{len(facts_by_node)} node(s) agree: {', '.join(agreed)}; {nproc}"
            else:
                summary = f"{len(facts_by_node)} node(s) agree: {', '.join([agreed[0], nproc, *agreed[1:]])}"
            out.append(self.passed(summary, sorted(facts_by_node), details=details))
        return out

    def _tie(self, flag: str, s: Split):
        return self.fail(
            f"the nodes disagree on {flag} with no majority: {s.sides_text(_shown)}", list(s.odd),
            actual={n: s.value_of(n) for n in s.odd}, expected="the same on every node",
            fix=f"launch every node with the same {flag}: no value is on more nodes than another, so nothing here "
                f"says which is right; take it from the job script, not per node{RDZV_FIX if 'rdzv' in flag else ''}")


def processes_per_node(facts_by_node) -> tuple[str, dict]:
    """("--nproc-per-node 8", {}) when every node says the same; otherwise each node's count, the world size and
    what heterogeneous nodes ask of the training code, with the counts in the details."""
    key, flag = NPROC
    counts = {n: (f.get("launch") or {}).get(key) for n, f in facts_by_node.items()}
    distinct = {repr(v) for v in counts.values()}
    if len(distinct) <= 1:
        return f"{flag} {_shown(next(iter(counts.values()), None))}", {}
    s = split(counts)
    known = [v for v in counts.values() if isinstance(v, int)]
    world = (f"world size {sum(known)}" if len(known) == len(counts)
             else "world size unknown: pass --nproc-per-node on every node")
    text = (f"processes per node differ ({s.sides_text(_shown)}; {world}): legal, torchrun starts each node's own "
            f"count; the training code must take its GPU from LOCAL_RANK and its rank from RANK, never compute ranks "
            f"as node_rank × nproc_per_node")
    return text, {"nproc_per_node": counts, "world_size": sum(known) if len(known) == len(counts) else None}


def _shown(value) -> str:
    return "not set" if value is None else str(value)
