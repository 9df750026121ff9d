"""Which flight-recorder instances a rank has, which of them to ask, and their records merged into one.

torch keeps one instance per event type, and 2.15 one per recording backend:
- gloo's, ``FlightRecorder<c10::Event>``: ``_dump_fr_trace_json()`` in the rank, the worker server's
  ``fr_trace_json`` handler (every torch; 2.13/2.14 have no ``backend=``: the handler ignores ``?backend=``).
- ProcessGroupNCCL's, ``FlightRecorder<at::cuda::CUDAEvent>``, only in CUDA builds (USE_C10D_NCCL): its own
  dump, ``_dump_nccl_trace_json(includeCollectives=None, onlyActive=None)`` in the rank, handler
  ``dump_nccl_trace_json`` over the worker server, whose only parameters are ``includecollectives`` and
  ``onlyactive`` (any other one, ``?backend=`` too, is answered 400). Asked only gloo's instance, a real NCCL
  job on torch 2.13 or 2.14 showed no NCCL collective, live or at exit.
- 2.15: one more per hooked backend, ``backend=`` naming it (default "gloo"): an nccl2 job (2.15's default
  "nccl", recorded through torchcomms' Python hook as ``nccl2:<op>``) asked without it gives gloo's empty record.

Where that was read (the flight recorder is a template, one static instance per ``EventType``):
- FlightRecorder.hpp:99-103 (``static FlightRecorder<EventType>* get()``), FlightRecorderDetail.hpp:507-597
  (``dump_json``: the record's fields), ProcessGroupNCCL.hpp:1516 (``dump_nccl_trace_json``): the headers of the
  torch 2.13.0 wheel (torch/include/torch/csrc/distributed/c10d/); 2.14.1's: FlightRecorderDetail.hpp:510,
  ProcessGroupNCCL.hpp:1538.
- pytorch/pytorch torch/csrc/distributed/c10d/FlightRecorderCuda.cpp (stored commit 4991dffe): lines 16-62
  register ``dump_nccl_trace_pickle``, 64-107 ``dump_nccl_trace_json`` (params includecollectives, onlyactive;
  "Invalid parameters - unexpected param passed in" for any other), line 120 instantiates
  ``FlightRecorder<at::cuda::CUDAEvent>``; ProcessGroupNCCL.cpp ``using FlightRecorderCUDA =
  FlightRecorder<at::cuda::CUDAEvent>`` and ``dump_nccl_trace_json`` -> ``FlightRecorderCUDA::get()->dump_json``;
  FlightRecorder.cpp ``dump_fr_trace_json`` -> ``FlightRecorder<c10::Event>::get()``, ProcessGroupGloo.cpp
  records into ``FlightRecorder<c10::Event>``. The source of the v2.13.0/v2.14.x tags themselves was not
  readable here (the stored copies are of other commits); the wheels were.
- The 2.14.1 CUDA wheel: libtorch_cuda.so holds ``dump_nccl_trace_json``, ``dump_nccl_trace_pickle``,
  ``includecollectives``, ``onlyactive``; libtorch_python.so ``_dump_nccl_trace_json``; libtorch_cpu.so has
  ``fr_trace_json`` and no ``fr_dump_file``. Its torch/distributed/debug/_debug_handlers.py reads NCCL through
  ``dump_nccl_trace_json`` (``onlyactive=true``), gloo through ``fr_trace_json``.
- The 2.15.0 CUDA wheel (run on CPU): ``_get_handler_names()`` = dump_nccl_trace_json, dump_nccl_trace_pickle,
  dump_traceback, pyspy_dump, wait_counter_values, fr_dump_file, fr_trace_json, ping, c10d_health_check;
  ``GET /handler/`` answers that list; ``dump_nccl_trace_json?backend=x`` answers 400. The 2.13.0 CPU wheel:
  dump_traceback, pyspy_dump, wait_counter_values, fr_trace_json, ping.

Which to ask is decided once per rank from its handler names (the worker server's ``GET /handler/``, torch's
WorkerServer.cpp): ``fr_dump_file`` came with 2.15's per-backend instances (absent from 2.14.1), so without it
only ``fr_trace_json`` is asked (2.13/2.14 answer the same record for every ``?backend=``);
``dump_nccl_trace_json`` where the rank has it. Pure but for ``Memo``: the bootstrap (in the rank) and the
worker-server clients (attach, the watchdog) share it."""
from __future__ import annotations

import json
from dataclasses import dataclass

# Every name a 2.15 instance may be kept under (distributed_c10d.py: `_FR_SELF_RECORDING_BACKENDS` and the
# hooked ones); an instance no backend of the job uses answers an empty record, which the merge drops.
BACKENDS = ("gloo", "nccl", "nccl2", "nccl-legacy", "nccl-lazy")  # nccl-lazy: new_group(backend="nccl-lazy")
DEFAULT = "gloo"
NCCL_HANDLER = "dump_nccl_trace_json"  # ProcessGroupNCCL's instance; asked without parameters: the whole record
NCCL_INSTANCE = "ProcessGroupNCCL"  # its name among a merged record's ``fr_backends``
PER_BACKEND_MARK = "fr_dump_file"  # a handler 2.15 added with ``backend=``: its torch keeps several instances
# Fields of one instance's own (FlightRecorderDetail.hpp dump_json: the NCCL version, each communicator's dump).
OWN_FIELDS = ("comm_lib_version", "nccl_comm_state")
MEMO_RANKS = 4096  # ranks remembered by one Memo (a node's, a job's): a bound, not a limit ever met


@dataclass(frozen=True)
class Instances:
    """The instances one rank's torch keeps beside gloo's: one per backend (2.15), ProcessGroupNCCL's (CUDA)."""
    per_backend: bool
    nccl: bool


UNKNOWN = Instances(per_backend=True, nccl=True)  # its handler names not known: ask every one (not remembered)


def instances_of(names) -> Instances | None:
    """The instances a rank has from its worker server's handler names (``GET /handler/``: a JSON list of
    strings); None when that is not what came."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return Instances(per_backend=PER_BACKEND_MARK in names, nccl=NCCL_HANDLER in names)


def handler(backend: str) -> str:
    """The worker server's handler path for one 2.15 instance (torch.distributed.debug asks ``?backend=<name>``)."""
    return "fr_trace_json" if backend == DEFAULT else f"fr_trace_json?backend={backend}"


def asks(instances: Instances) -> list[tuple[str, str]]:
    """(instance name, handler path) of every instance to ask, gloo's first."""
    out = [(DEFAULT, handler(DEFAULT))]
    if instances.per_backend:
        out += [(b, handler(b)) for b in BACKENDS[1:]]
    if instances.nccl:
        out.append((NCCL_INSTANCE, NCCL_HANDLER))
    return out


def gather(ask_one, instances: Instances = UNKNOWN) -> dict | None:
    """One rank's record from every instance it has (``ask_one(handler path)``: that instance's parsed record,
    None when it did not answer), merged; the default instance first: a rank that does not answer it is not
    asked the others."""
    records = {}
    for name, path in asks(instances):
        records[name] = ask_one(path)
        if name == DEFAULT and records[name] is None:
            return None
    return merge(records)


class Memo:
    """Each rank's Instances, found once for the job (keyed by its worker socket: one rank's process): the
    handler names do not change while the process lives, and asking them costs one request."""

    def __init__(self) -> None:
        self._known: dict = {}

    def of(self, key, names) -> Instances:
        """``key``'s Instances; ``names()`` (its handler names, None: no answer) is called only the first time.
        A rank whose names did not come is asked every instance, and its names again next time."""
        if key in self._known:
            return self._known[key]
        found = instances_of(names())
        if found is None:
            return UNKNOWN
        if len(self._known) >= MEMO_RANKS:
            self._known.clear()
        self._known[key] = found
        return found


def _key(e: dict) -> tuple:
    return (str(e.get("profiling_name")), str(e.get("pg_id")), str(e.get("record_id")), str(e.get("time_created_ns")),
            str(e.get("collective_seq_id")), str(e.get("p2p_seq_id")))


def merge(records: dict[str, dict | None]) -> dict | None:
    """One record of the instances' (backend -> parsed record, None: no answer): the entries of all, oldest first,
    each once (a torch that ignores ``backend=`` answers the same record for every name); pg_config joined;
    ``comm_lib_version`` and ``nccl_comm_state`` from the instance that has them (gloo's are empty).
    ``fr_backends`` lists the instances that had entries. One instance in use: its record unchanged. None when
    no instance answered.

    Two instances in use keep their groups apart (``_apart``): a group with two backends (the default group of
    ``init_process_group("cpu:gloo,cuda:nccl")``) is one name in both instances, with a sequence count and a
    pg_status each; merged under one name, gloo's all_reduce #5 and NCCL's #5 would be one collective."""
    answered = {b: r for b, r in records.items() if isinstance(r, dict)}
    if not answered:
        return None
    distinct: dict[str, dict] = {}  # the instances in use, each record once (a group's config counts: it is there
    for backend, r in answered.items():  # before any entry)
        if (r.get("entries") or r.get("pg_status") or r.get("pg_config")) and r not in distinct.values():
            distinct[backend] = r
    if len(distinct) <= 1:  # one instance in use (or a torch that ignores backend=): its record as it came
        return next(iter(distinct.values()), None) or answered.get(DEFAULT) or next(iter(answered.values()))
    base = dict(answered.get(DEFAULT) or next(iter(answered.values())))
    entries, seen, used = [], set(), []
    config: dict = {}
    status: dict = {}
    named: set[str] = set()  # the group names the instances merged so far configure
    taken: set[str] = set()  # and the pg_ids they number their groups with
    for index, (backend, record) in enumerate(distinct.items()):
        clash = frozenset(named & _configured(record))
        # a renamed group's pg_id moves too: a rank reads pg_id 0 as the default group, whatever its name
        shift = index * PG_ID_APART if clash or _pg_ids(record) & taken else 0
        apart = _apart(backend, shift, clash)
        fresh = [e for e in record.get("entries") or [] if isinstance(e, dict) and _key(e) not in seen]
        seen.update(_key(e) for e in fresh)
        if fresh:
            used.append(backend)
        entries += [apart.entry(e) for e in fresh]
        if isinstance(record.get("pg_config"), dict):
            for k, v in record["pg_config"].items():
                config.setdefault(apart.config_key(k, v), apart.config(v))
        if isinstance(record.get("pg_status"), dict):
            for k, v in record["pg_status"].items():
                status.setdefault(apart.pg_id(k), v)
        named |= _configured(record)
        taken |= {str(apart.pg_id(i)) for i in _pg_ids(record)}
    for field in OWN_FIELDS:  # NCCL's version and communicators come in ProcessGroupNCCL's record only
        if not base.get(field):
            base[field] = next((r[field] for r in answered.values() if r.get(field)), base.get(field))
    base["entries"] = sorted(entries, key=lambda e: _ns(e.get("time_created_ns")))
    base["pg_config"], base["pg_status"], base["fr_backends"] = config, status, used
    return base


# A later instance whose pg_ids an earlier one uses has them moved up by this much times its place: pg_id is the
# rank's own numbering of its groups (groups are matched across ranks by name), so moving it changes no match,
# and no job makes a million groups.
PG_ID_APART = 1 << 20


def _pg_ids(record: dict) -> set[str]:
    """The pg_ids one instance's record numbers its groups with (its pg_status keys, its entries')."""
    status = record.get("pg_status") if isinstance(record.get("pg_status"), dict) else {}
    return {str(k) for k in status} | {str(e["pg_id"]) for e in record.get("entries") or []
                                       if isinstance(e, dict) and "pg_id" in e}


def _configured(record: dict) -> set[str]:
    """The group names an instance's pg_config holds (written when a group is made, on every member: the same on
    every rank, whatever it recorded since); torch 2.13's gloo names the default group "" there."""
    config = record.get("pg_config")
    if not isinstance(config, dict):
        return set()
    return {_group_name(v.get("name", k) if isinstance(v, dict) else k) for k, v in config.items()}


def _group_name(name) -> str:
    return str(name) or "0"


@dataclass(frozen=True)
class _apart:
    """How one instance's groups are renamed in a merged record: its pg_ids moved up by ``shift`` (where an
    earlier instance numbers its groups alike); a group an earlier instance also configures (``clash``: the same
    name, another backend) named ``<name>@<backend>`` in its entries and pg_config, on every rank alike."""
    backend: str
    shift: int
    clash: frozenset

    def pg_id(self, value):
        try:
            moved = int(value) + self.shift
        except (TypeError, ValueError):
            return value
        return moved if isinstance(value, int) else str(moved)

    def name(self, value) -> str:
        name = _group_name(value)
        return f"{name}@{self.backend}" if name in self.clash else str(value)

    def entry(self, e: dict) -> dict:
        if not self.shift and not self.clash:
            return e
        out = dict(e)
        if "pg_id" in out:
            out["pg_id"] = self.pg_id(out["pg_id"])
        pg = out.get("process_group")
        if isinstance(pg, (list, tuple)) and pg:
            out["process_group"] = [self.name(pg[0]), *pg[1:]]
        return out

    def config_key(self, key, value) -> str:
        name = value.get("name", key) if isinstance(value, dict) else key
        return self.name(name) if _group_name(name) in self.clash else key

    def config(self, value):
        if not isinstance(value, dict) or _group_name(value.get("name", "")) not in self.clash:
            return value
        return {**value, "name": self.name(value.get("name", ""))}


def _ns(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def dump_every_instance(c10d) -> bytes:
    """The rank's whole flight record as JSON bytes, as torch's own dump gives them: every instance its torch
    keeps (2.15: one per backend, asked by ``backend=``; 2.13/2.14: gloo's, which takes no ``backend=``; a CUDA
    build: ProcessGroupNCCL's too, ``_dump_nccl_trace_json``), merged (``merge``). Called in the rank at its exit
    and at the launcher's SIGTERM (launch/bootstrap.py), which writes the bytes as they are."""
    try:
        first = c10d._dump_fr_trace_json(backend=DEFAULT)
        others = BACKENDS[1:]
    except TypeError:  # torch 2.13/2.14: one instance per event type
        first = c10d._dump_fr_trace_json()
        others = ()
    records = {DEFAULT: _parsed(first)}
    for backend in others:
        records[backend] = _asked(lambda b=backend: c10d._dump_fr_trace_json(backend=b))
    nccl = getattr(c10d, "_dump_nccl_trace_json", None)  # CUDA builds only (USE_C10D_NCCL)
    if nccl is not None:
        records[NCCL_INSTANCE] = _asked(nccl)
    merged = merge(records)
    if merged is None or merged is records[DEFAULT]:
        return _bytes(first)
    return json.dumps(merged).encode()


def _parsed(raw) -> dict | None:
    try:
        data = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _asked(dump) -> dict | None:
    try:
        return _parsed(dump())
    except Exception:  # noqa: BLE001 - an instance that cannot answer is left out
        return None


def _bytes(raw: bytes | str) -> bytes:
    return raw.encode() if isinstance(raw, str) else raw
