"""ClusterView: what a cluster-phase check's ``gather`` sees of the other nodes (``ctx.cluster``)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

FULL_MESH_MAX = 64  # above this, ring neighbours plus k random peers (probe fan-out stays O(k) per node)
RANDOM_PEERS = 8


@dataclass
class ClusterView:
    me: dict  # this node's roster entry: name, rank, host, fqdn, addr, probe_port, launch
    nodes: list[dict]  # every accepted node's roster entry, in rank order
    master: dict  # the master node's roster entry
    endpoint: str  # the rendezvous endpoint as given (HOST:PORT)
    timeout: float = 30.0
    shared_dir: str | None = None
    code_dir: str | None = None
    pg_store: Callable[[str], Any] | None = None  # backend -> the store a process group meets in
    budget: Any = None  # the run's Budget: a collective takes its time limit from what is left
    world_rank: int = 0  # this node's index among accepted nodes (process-group rank)
    extra: dict = field(default_factory=dict)
    # the exchange step (exchange.py): what the master's checks published, {check name: JSON object}
    published: dict[str, dict] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)  # run at the node's end, even on SIGTERM

    def on_close(self, undo: Callable[[], None]) -> None:
        """Ask the node to call ``undo`` when its run ends, however it ends (a file a publish created)."""
        self.cleanups.append(undo)

    @property
    def world_size(self) -> int:
        return len(self.nodes)

    def peers_to_probe(self, seed: int = 0) -> list[dict]:
        """All other nodes up to FULL_MESH_MAX nodes; above, ring neighbours plus k random peers."""
        others = [n for n in self.nodes if n["name"] != self.me["name"]]
        if len(self.nodes) <= FULL_MESH_MAX:
            return others
        idx = next(i for i, n in enumerate(self.nodes) if n["name"] == self.me["name"])
        n = len(self.nodes)
        chosen = {(idx + 1) % n, (idx - 1) % n}
        rng = random.Random(seed * 7919 + idx)
        pool = [i for i in range(n) if i != idx and i not in chosen]
        chosen.update(rng.sample(pool, min(RANDOM_PEERS, len(pool))))
        return [self.nodes[i] for i in sorted(chosen)]
