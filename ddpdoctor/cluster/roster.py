"""The roster: which nodes joined, under which readable names, and who was rejected or is missing.

Pure functions over validated identity records; the master builds the roster, every node reads it.
"""
from __future__ import annotations

import hashlib

DISPLAY_HOST_MAX = 48  # a host name longer than this is shortened for display (the full name stays in facts)


def display_host(host: str) -> str:
    """A host name short enough for a table column, still unique: head + hash of the whole."""
    if len(host) <= DISPLAY_HOST_MAX:
        return host
    digest = hashlib.sha256(host.encode()).hexdigest()[:6]
    return f"{host[:DISPLAY_HOST_MAX - 8]}…{digest}"


def name_nodes(idents: list[dict]) -> None:
    """Give every node a unique, readable name: its hostname, then host@addr, then host@addr#rank."""
    def count(key) -> dict[str, int]:
        seen: dict[str, int] = {}
        for i in idents:
            seen[key(i)] = seen.get(key(i), 0) + 1
        return seen

    by_host = count(lambda i: i["host"])
    by_addr = count(lambda i: f"{i['host']}@{i['addr']}")
    for i in idents:
        host = display_host(i["host"])
        if by_host[i["host"]] == 1:
            i["name"] = host
        elif by_addr[f"{i['host']}@{i['addr']}"] == 1:
            i["name"] = f"{host}@{i['addr']}"
        else:
            i["name"] = f"{host}@{i['addr']}#r{i['rank']}" + (f".{i['claim']}" if i["claim"] > 1 else "")


def ranks_text(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def accepted(idents: list[dict], rejected: dict) -> dict:
    """The roster once every rank has a valid identity."""
    idents = sorted(idents, key=lambda i: (i["rank"], i["claim"]))
    name_nodes(idents)
    master = next(i for i in idents if i["rank"] == 0)
    return {"status": "ok", "nodes": idents, "master": master["name"], "rejected": rejected}


def aborted(message: str) -> dict:
    return {"status": "aborted", "message": message}


def missing_message(*, present: list[int], missing: list[int], idents: list[dict], endpoint: str, nnodes: int,
                    timeout: float, hosts: list[str] | None = None, launcher: str | None = None,
                    command: str | None = None) -> str:
    """Who is missing, by host where the launcher lists the job's hosts, and that launcher's own fix
    (``command``: what each node runs, when it is not this preflight: run-trainer's gate)."""
    from ..grouping import compress_hosts
    from .launcher_env import host_list_name, missing_hosts, start_everywhere_fix

    known = compress_hosts(f"{i['host']}" for i in idents) if len(idents) > 8 else \
        ", ".join(f"{i['host']} ({i['addr']}) rank {i['rank']}" for i in idents)
    absent = missing_hosts(hosts, [i["host"] for i in idents])
    who = f"missing rank(s) {ranks_text(missing[:32])}" + (" ..." if len(missing) > 32 else "")
    if absent:
        who += f" = host(s) {compress_hosts(absent)} (listed in {host_list_name(launcher)}, never joined)"
    command = command or f"ddpdoctor preflight --master {endpoint} --nnodes {nnodes}"
    msg = (f"{len(present)}/{nnodes} nodes joined {endpoint} within {timeout:g} s; {who}. "
           f"Joined: {known or 'none'}. Fix: "
           f"{start_everywhere_fix(launcher, command, others_joined=len(present) > 1, endpoint=endpoint)}; a node "
           "that started but could not join says why in its own output (e.g. torch does not import there)")
    dups = sorted({i["rank"] for i in idents if i["claim"] > 1})
    if dups:
        msg += f"; rank(s) {ranks_text(dups)} were claimed by more than one node (give each node its own --node-rank)"
    return msg
