"""The watchdog's evidence of every rank when it judges: process state, flight record, stacks, local rank."""
from __future__ import annotations

import threading
from pathlib import Path

import psutil

from ..evidence.procs import askable, local_rank_of, rank_per_process, signal_stacks


def evidence_of(procs: list[psutil.Process], run_dir: Path, sockets: str | None, host: str,
                node: str) -> dict[int, dict]:
    """Every rank's evidence at once (threads: a rank that does not answer costs its timeout only once): its
    process state, flight record, stacks (from its worker server, else SIGUSR1's or py-spy's), local rank."""
    from ..evidence import worker_client

    by_rank, evidence = {rank: p for p, rank in zip(procs, rank_per_process(procs)) if rank is not None}, {}

    def one(rank: int, proc: psutil.Process) -> None:
        state = worker_client.process_state(proc.pid)
        ev = {"host": host, "node": node, "pid": proc.pid, "state": state, "fr": None, "stacks": None,
              "local_rank": local_rank_of(proc)}
        if state == "running" and sockets:
            path = sockets.replace("{rank}", str(rank))
            ev["fr"] = worker_client.flight_record(path)
            if askable(run_dir, [proc], [rank]):  # else SIGUSR1's stack below: its exit is under way
                ev["stacks"] = worker_client.ask(path, "dump_traceback")
        evidence[rank] = ev

    threads = [threading.Thread(target=one, args=(r, p), daemon=True) for r, p in by_rank.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    missing_stacks = [p for r, p in by_rank.items() if r in evidence and not evidence[r]["stacks"]
                      and evidence[r]["state"] == "running"]
    if missing_stacks:
        for rank, text in signal_stacks(missing_stacks, run_dir / "stacks").items():
            evidence.setdefault(rank, {})["stacks"] = text
    return evidence
