"""One benchmark rank, as torchrun, srun or torch's elastic launcher starts it: join, sweep, localise, report.

Reads the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT). Global rank 0 writes
the nccl-bench document (JSON) to the configured path; the CLI renders it. Every collective runs under the
process-group timeout, so a rank that dies or hangs ends the run instead of hanging it.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import time
from dataclasses import asdict

from .. import documents
from ..exitcodes import ExitCode
from . import localise
from .feed import FeedWriter, feed_path
from .harness import BenchConfig, Context, measure, planned_rows, start_heartbeat, summary, sweep

CONFIG_ENV = "DDPDOCTOR_BENCH_CONFIG"
RANKS_PER_NODE_ENV = "DDPDOCTOR_BENCH_TEST_RANKS_PER_NODE"  # test hook: pretend every K ranks are a node


def _device(backend: str):
    import torch

    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def node_of_ranks(hosts: list[str]) -> list[str]:
    k = int(os.environ.get(RANKS_PER_NODE_ENV, "0") or 0)
    if k > 0:
        return [f"node{r // k}" for r in range(len(hosts))]
    return hosts


def _wave(cfg: BenchConfig, device, nodes_of_rank: list[str], pairs: list[tuple[str, str]]) -> dict:
    """Disjoint pairs of nodes, benchmarked at once; returns {pair: busbw} (known on every rank)."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    groups = []
    for a, b in pairs:  # every rank creates every group, in the same order, as torch requires
        ranks = [r for r, nd in enumerate(nodes_of_rank) if nd in (a, b)]
        groups.append((ranks, dist.new_group(ranks, timeout=datetime.timedelta(seconds=cfg.timeout_s))))
    figures = torch.zeros(len(pairs), dtype=torch.float64, device=device)
    for i, (ranks, group) in enumerate(groups):
        if rank in ranks:
            row = measure("all_reduce", cfg.localise_bytes, Context(device, group), cfg, group_label="pair")
            if row is not None and rank == ranks[0]:  # the better form: a loaded host's dip hits one, a slow node both
                figures[i] = max(form["busbw_gbs"] for form in (row.in_place, row.out_of_place) if form)
    dist.all_reduce(figures)  # only the first rank of each pair contributed: the sum is its figure
    return {pair: float(v) for pair, v in zip(pairs, figures.tolist())}


def _split_waves(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    waves: list[list[tuple[str, str]]] = []
    for pair in pairs:
        for wave in waves:
            if not any(set(pair) & set(p) for p in wave):
                wave.append(pair)
                break
        else:
            waves.append([pair])
    return waves


RETESTS = 2  # a node is named only if every one of its retests is slow


def run_localisation(cfg: BenchConfig, device, nodes_of_rank: list[str]) -> tuple[list[dict], dict | None]:
    """Intra-node and inter-node all_reduce rows, then the pairwise hunt when there are 3+ nodes."""
    import torch.distributed as dist

    rank = dist.get_rank()
    nodes = list(dict.fromkeys(nodes_of_rank))
    rows = []
    intra_groups = [(nd, [r for r, x in enumerate(nodes_of_rank) if x == nd]) for nd in nodes]
    made = [(nd, ranks, dist.new_group(ranks)) for nd, ranks in intra_groups]
    for nd, ranks, group in made:
        if rank in ranks and len(ranks) > 1:
            row = measure("all_reduce", cfg.localise_bytes, Context(device, group), cfg, group_label="intra")
            if row is not None and rank == ranks[0]:
                row.extra["node"] = nd
                rows.append(row)
    leaders = [ranks[0] for _, ranks in intra_groups]
    inter = dist.new_group(leaders)
    if len(leaders) > 1 and rank in leaders:
        row = measure("all_reduce", cfg.localise_bytes, Context(device, inter), cfg, group_label="inter")
        if row is not None and rank == 0:
            rows.append(row)
    found = None
    if len(nodes) >= 3:
        round1: dict = {}
        for wave in _split_waves(localise.pairings(nodes)):
            round1.update(_wave(cfg, device, nodes_of_rank, wave))
        labels = {f"{a}+{b}": (a, b) for a, b in round1}
        low = [labels[k] for k in localise.outliers({f"{a}+{b}": v for (a, b), v in round1.items()}, cfg.threshold)]
        round2: dict = {}
        for _ in range(RETESTS):  # the best of each retest: a slow node is slow every time, a passing dip is not
            for wave in _split_waves(localise.retest_pairings(round1, low)):
                for pair, busbw in _wave(cfg, device, nodes_of_rank, wave).items():
                    round2[pair] = max(round2.get(pair, 0.0), busbw)
        found = localise.judge(round1, round2, cfg.threshold)
    # Only each group's first rank holds its rows: every rank gets them all.
    return [row for held in all_gather_json([asdict(r) for r in rows], device) for row in held], found


def all_gather_json(value, device) -> list:
    """Every rank's JSON-serialisable value, in rank order: JSON bytes in padded uint8 tensors (no pickle)."""
    import torch
    import torch.distributed as dist

    blob = json.dumps(value).encode()
    size = torch.tensor([len(blob)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    mine = torch.zeros(max(int(s.item()) for s in sizes), dtype=torch.uint8, device=device)
    mine[:len(blob)] = torch.tensor(list(blob), dtype=torch.uint8, device=device)
    everyone = [torch.zeros_like(mine) for _ in sizes]
    dist.all_gather(everyone, mine)
    return [json.loads(bytes(t[:int(s.item())].cpu().tolist())) for s, t in zip(sizes, everyone)]


def main(cfg_dict: dict | None = None) -> int:
    """Entry point of one rank (elastic_launch calls it; `ddpdoctor nccl-bench` under torchrun too)."""
    import torch.distributed as dist

    if cfg_dict is None:
        with open(os.environ[CONFIG_ENV]) as fh:
            cfg_dict = json.load(fh)
    cfg = BenchConfig(**cfg_dict)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    device = _device(cfg.backend)
    started = time.perf_counter()
    dist.init_process_group(cfg.backend, timeout=datetime.timedelta(seconds=cfg.timeout_s),
                            device_id=device if device.type == "cuda" else None)
    beating = start_heartbeat(dist.get_rank(), socket.gethostname())
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        hosts = all_gather_json(socket.gethostname(), device)
        ctx = Context(device)
        # Rank 0 hands each row to the command as it is measured: printed at once, kept after an interrupt.
        feed = FeedWriter(feed_path(cfg.result_path) if rank == 0 else None)
        feed.put({"header": {"run": run_section(cfg, hosts, world), "hosts": hosts_section(hosts),
                             "planned": planned_rows(cfg, world)}})
        rows = [asdict(r) for r in sweep(ctx, cfg, on_row=lambda row: feed.put({"row": asdict(row)}))]
        loc_rows, found = run_localisation(cfg, device, node_of_ranks(hosts)) if cfg.localise else ([], None)
        if rank == 0 and cfg.result_path:
            doc = document(cfg, rows + loc_rows, found, hosts, world, time.perf_counter() - started)
            documents.dump(doc, cfg.result_path)
    finally:
        if beating is not None:
            beating.set()
        dist.destroy_process_group()
    return 0


def run_section(cfg: BenchConfig, hosts: list[str], world: int, wall: float | None = None) -> dict:
    """The document's ``run``: the settings and the ranks' layout (the feed's header carries it too)."""
    nodes = list(dict.fromkeys(node_of_ranks(hosts)))
    return {"backend": cfg.backend, "world_size": world, "nnodes": len(nodes),
            "nproc_per_node": world // max(1, len(nodes)), "dtype": cfg.dtype, "ops": cfg.ops,
            "min_bytes": min(cfg.sizes), "max_bytes": max(cfg.sizes), "sizes": cfg.sizes, "warmup": cfg.warmup,
            "iters": cfg.iters, "graph": cfg.graph, "check": cfg.check, "min_busbw": cfg.min_busbw,
            "wall_s": None if wall is None else round(wall, 3)}


def hosts_section(hosts: list[str]) -> dict:
    return {str(r): h for r, h in enumerate(hosts)}


def document(cfg: BenchConfig, rows: list[dict], found: dict | None, hosts: list[str], world: int, wall: float) -> dict:
    summ = summary([r for r in rows if r.get("group") == "all"])
    failed = (summ["wrong"] > 0 or (cfg.min_busbw is not None and summ["avg_busbw_gbs"] < cfg.min_busbw)
              or bool(found and found.get("suspects")))
    verdict = "fail" if failed else "pass"
    return documents.envelope(
        "nccl-bench", run=run_section(cfg, hosts, world, wall), hosts=hosts_section(hosts),
        rows=rows, summary=summ, expected={}, localisation=found,
        verdict=verdict, exit_code=ExitCode.FAIL if failed else ExitCode.OK, error=None,
    )


def interrupted_document(header: dict, rows: list[dict], signame: str | None, exit_code: int,
                         error: str | None = None) -> dict:
    """What a sweep cut short had measured: the rows rank 0 finished (the feed), their footer, and why it ended:
    ``interrupted`` (the signal), or ``error`` (a rank died or stopped answering: "fail"). Stopped by a signal,
    a wrong element among the rows fails it; otherwise "warn": an unfinished sweep."""
    summ = summary([r for r in rows if r.get("group", "all") == "all"])
    return documents.envelope(
        "nccl-bench", run=header.get("run") or {}, hosts=header.get("hosts") or {}, rows=rows, summary=summ,
        expected={}, localisation=None, interrupted=signame, planned_rows=header.get("planned"),
        verdict="fail" if summ["wrong"] or error else "warn", exit_code=exit_code,
        error={"message": error} if error else None,
    )
