"""Which flight-recorder instances a rank has, and their records merged into one: torch 2.15 keeps one instance
per recording backend and its debug handlers and ``_dump_fr_trace_json()`` answer for one, ``backend=`` naming
it (default "gloo"): an nccl2 job (2.15's default "nccl", recorded through torchcomms' Python hook as
``nccl2:<op>``) asked without it gives gloo's empty record. torch 2.13 and 2.14 have one instance and no
``backend=``. Pure: the bootstrap (in the rank) and the worker-server clients (attach, the watchdog) share it."""
from __future__ import annotations

import json

# Every name a 2.15 instance may be kept under (distributed_c10d.py: `_FR_SELF_RECORDING_BACKENDS` and the
# hooked ones); an instance no backend of the job uses answers an empty record, which the merge drops.
BACKENDS = ("gloo", "nccl", "nccl2", "nccl-legacy", "nccl-lazy")  # nccl-lazy: new_group(backend="nccl-lazy")
DEFAULT = "gloo"


def handler(backend: str) -> str:
    """The worker server's handler path for one instance (torch.distributed.debug asks ``?backend=<name>``)."""
    return "fr_trace_json" if backend == DEFAULT else f"fr_trace_json?backend={backend}"


def gather(ask_one) -> dict | None:
    """One rank's record from every instance (``ask_one(backend)``: that instance's parsed record, None when it
    did not answer), merged; the default instance first: a rank that does not answer it is not asked the others."""
    records = {}
    for backend in BACKENDS:
        records[backend] = ask_one(backend)
        if backend == DEFAULT and records[backend] is None:
            return None
    return merge(records)


def _key(e: dict) -> tuple:
    return (str(e.get("profiling_name")), str(e.get("pg_id")), str(e.get("record_id")), str(e.get("time_created_ns")),
            str(e.get("collective_seq_id")), str(e.get("p2p_seq_id")))


def merge(records: dict[str, dict | None]) -> dict | None:
    """One record of the instances' (backend -> parsed record, None: no answer): the entries of all, oldest first,
    each once (a torch that ignores ``backend=`` answers the same record for every name); pg_config joined;
    pg_status per group from the instance whose entries hold that group (else the first that has it).
    ``fr_backends`` lists the instances that had entries. One instance in use: its record unchanged. None when
    no instance answered."""
    answered = {b: r for b, r in records.items() if isinstance(r, dict)}
    if not answered:
        return None
    distinct = []
    for r in answered.values():
        if (r.get("entries") or r.get("pg_status")) and r not in distinct:
            distinct.append(r)
    if len(distinct) <= 1:  # one instance in use (or a torch that ignores backend=): its record as it came
        return distinct[0] if distinct else answered.get(DEFAULT) or next(iter(answered.values()))
    base = dict(answered.get(DEFAULT) or next(iter(answered.values())))
    entries, seen, used = [], set(), []
    config: dict = {}
    status: dict = {}
    for backend, record in answered.items():
        own = [e for e in record.get("entries") or [] if isinstance(e, dict)]
        fresh = [e for e in own if _key(e) not in seen]
        seen.update(_key(e) for e in fresh)
        entries += fresh
        if fresh:
            used.append(backend)
        if isinstance(record.get("pg_config"), dict):
            for k, v in record["pg_config"].items():
                config.setdefault(k, v)
        if isinstance(record.get("pg_status"), dict):
            groups = {str(e.get("pg_id")) for e in own}
            for k, v in record["pg_status"].items():
                if str(k) in groups or k not in status:
                    status[k] = v
    base["entries"] = sorted(entries, key=lambda e: _ns(e.get("time_created_ns")))
    base["pg_config"], base["pg_status"], base["fr_backends"] = config, status, used
    return base


def _ns(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def dump_every_instance(c10d) -> bytes:
    """The rank's whole flight record as JSON bytes, as torch's own dump gives them: every instance its torch
    keeps (2.15: one per backend, asked by ``backend=``; 2.13/2.14: the one, which takes no ``backend=``), merged
    (``merge``). Called in the rank at its exit and at the launcher's SIGTERM (launch/bootstrap.py), which writes
    the bytes as they are."""
    try:
        first = c10d._dump_fr_trace_json(backend=DEFAULT)
    except TypeError:  # torch 2.13/2.14: one instance
        return _bytes(c10d._dump_fr_trace_json())
    records = {}
    try:
        records[DEFAULT] = json.loads(first)
    except ValueError:
        pass
    for backend in BACKENDS[1:]:
        try:
            records[backend] = json.loads(c10d._dump_fr_trace_json(backend=backend))
        except Exception:  # noqa: BLE001 - an instance that cannot answer is left out
            continue
    merged = merge(records)
    return json.dumps(merged).encode() if merged is not None else _bytes(first)


def _bytes(raw: bytes | str) -> bytes:
    return raw.encode() if isinstance(raw, str) else raw
