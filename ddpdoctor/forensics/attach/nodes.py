"""attach on several nodes: the same command on every node (srun --overlap, pbsdsh, mpiexec, an ssh loop), the
nodes meeting and authenticating exactly as preflight's do (cluster/: mailbox, envelope, key file, roster; no
protocol of its own). Each node's read of its own ranks (stacks, and the flight record where one was had) travels
as the facts of one engine-made check (``RanksCheck``); the master rebuilds every rank's record and asks the one
judge. A node with no rank of the job
says so; a node that never joins is named as preflight names it (exit 3)."""
from __future__ import annotations

import math
import time
from typing import Any, Mapping

from ...api import Check, Level, Result
from ...numbers import parse_int
from ..evidence import pyspy
from ..evidence.model import Frame, RankState, Source, STILL_RUNNING
from ..evidence.stacks import wait_of
from .sample import RankRead

CHECK = "attach-ranks"
MAX_FRAMES = 96  # a Lightning stack with its native frames (py-spy --native) is 60 and more
MAX_LOCALS = 24
MAX_TEXT = 300
MAX_RECORD_ENTRIES = 32  # a flight record's newest entries that travel: enough to place a rank around a hang
MAX_VERSION = 32  # a record's comm_lib_version ("2.28.9"): the master's NCCL RAS needs it (nccl_ras.consult)


class RanksCheck(Check):
    """This node's ranks of the job, read from outside (run by the cluster engine as a local-phase check)."""
    name = CHECK
    description = "the job's ranks on this node, read from outside with py-spy (ddpdoctor attach)"
    phase = "local"
    facts_shape = {"ranks": ["object"]}

    def __init__(self, read_here):
        self._read_here = read_here  # () -> (job json or None, [RankRead], note)
        self.timeout_s = 120.0

    def gather(self, ctx) -> dict:
        from . import job_access

        started = time.monotonic()
        job, reads, note = self._read_here()
        return {"job": job, "ranks": [to_fact(r) for r in reads], "note": note,
                "notes": [n[:MAX_TEXT * 2] for n in job_access.take_notes()],
                "watched_s": round(time.monotonic() - started, 1)}

    def compare(self, facts_by_node: Mapping[str, dict], opts: Mapping[str, Any]) -> list[Result]:
        """On the master, with every node's ranks: the one verdict (so every node's exit code is the master's),
        and a node with no rank of the job named."""
        out = []
        reads, job, _ = reads_from_facts(facts_by_node)
        if reads:
            from .decide import decide, outcome_of

            diag = decide(reads, parse_world(job, reads), watched_s=max(
                (parse_float((f or {}).get("watched_s")) or 0.0 for f in facts_by_node.values()), default=0.0))
            level = Level(outcome_of(diag).verdict)
            hosts = sorted({str(c.get("host")) for c in diag.get("culprits") or [] if c.get("host")})
            out.append(Result(CHECK, level, f"{diag['category']}: {diag['summary']}",
                              hosts or sorted(facts_by_node), fix=diag.get("fix", "") if level != Level.PASS else ""))
        for node, facts in sorted(facts_by_node.items()):
            ranks = (facts or {}).get("ranks") or []
            if not ranks:
                out.append(Result(CHECK, Level.WARN, f"no rank of the job runs on {node}"
                                  + (f" ({facts.get('note')})" if (facts or {}).get("note") else ""), [node],
                                  fix="run attach on the nodes the job runs on (the launcher's host list)"))
            else:
                out.append(Result(CHECK, Level.PASS, f"{len(ranks)} rank(s) read on {node}", [node]))
        return out


# The only locals that travel: the peer of a send/recv, as an integer (stacks.wait_of reads them on the master).
# Every other local (a token, a password, a batch) stays on its node: whether a rank moved between the samples,
# the one use of all its locals, is decided where it was read; the store's messages are sealed, not encrypted.
PEER_LOCALS = ("dst", "src", "group_dst", "group_src")


def to_fact(read: RankRead) -> dict:
    """A rank's read as the JSON fact that goes to the master: its frames with no local but a peer's rank, the
    whole redacted (redact.redact_evidence) before it leaves the process."""
    from ...redaction import redact_evidence

    s = read.state
    return redact_evidence({
        "rank": read.rank, "pid": read.pid, "host": read.host, "local_rank": read.local_rank,
        "moved": read.moved, "waited": read.waited, "cpu": read.cpu, "io": read.io,
        "failure": read.failure.value if read.failure else None, "error": read.error[:MAX_TEXT],
        "frames": [[f.file[:MAX_TEXT], f.line, f.function[:MAX_TEXT], _peer_locals(f.locals)]
                   for f in s.frames[:MAX_FRAMES]] if s else None,
        "record": _thin_record(read.recorded.raw.get("fr")) if read.recorded is not None else None,
        "default_group": s.raw.get("default_group") if s else None})


def _peer_locals(pairs) -> list[list[str]]:
    out = []
    for k, v in pairs:
        peer = parse_int(v, lo=0, hi=1 << 24) if k in PEER_LOCALS else None
        if peer is not None:
            out.append([k, str(peer)])
    return out


def _thin_record(fr) -> dict | None:
    """The flight record a node read (worker server, torch's dump pipe), cut to what places the rank: its groups'
    status and config and its newest entries, each entry's call sites few; its NCCL version (RAS)."""
    if not isinstance(fr, dict):
        return None
    entries = [dict(e, frames=(e.get("frames") or [])[:8]) for e in (fr.get("entries") or [])[-MAX_RECORD_ENTRIES:]
               if isinstance(e, dict)]
    return {"pg_status": fr.get("pg_status") or {}, "pg_config": fr.get("pg_config") or {}, "entries": entries,
            "comm_lib_version": _version(fr.get("comm_lib_version"))}


def _version(raw: Any) -> str:
    """A record's NCCL version as it may travel: a short string, else none ("")."""
    return raw if isinstance(raw, str) and len(raw) <= MAX_VERSION else ""


def from_fact(fact: Any, node: str) -> RankRead | None:
    """A rank another node read, validated (a malformed one is dropped: it came over the wire)."""
    if not isinstance(fact, dict):
        return None
    rank, pid = parse_int(fact.get("rank"), hi=1 << 24), parse_int(fact.get("pid"), hi=1 << 31)
    if rank is None:
        return None
    read = RankRead(rank, pid or 0, str(fact.get("host") or node)[:MAX_TEXT], parse_int(fact.get("local_rank")),
                    moved=fact.get("moved") if isinstance(fact.get("moved"), bool) else None,
                    error=str(fact.get("error") or "")[:MAX_TEXT], waited=fact.get("waited") is True,
                    cpu=parse_float(fact.get("cpu")), io=parse_float(fact.get("io")))
    failure = fact.get("failure")
    if failure is not None:
        read.failure = next((f for f in pyspy.DumpFailure if f.value == failure), pyspy.DumpFailure.OTHER)
        return read
    frames = []
    for item in (fact.get("frames") or [])[:MAX_FRAMES]:
        if not (isinstance(item, list) and len(item) == 4):
            return None
        file, line, func, pairs = item
        pairs = [p for p in pairs[:MAX_LOCALS] if isinstance(p, list) and len(p) == 2] if isinstance(pairs, list) else []
        frames.append(Frame(str(file)[:MAX_TEXT], parse_int(line, hi=10**9) or 0, str(func)[:MAX_TEXT],
                            tuple((str(k)[:64], str(v)[:MAX_TEXT]) for k, v in pairs)))
    frames_t = tuple(frames)
    default = fact.get("default_group")
    read.state = RankState(rank, Source.PY_SPY, host=read.host, node=node, pid=pid, local_rank=read.local_rank,
                           frames=frames_t, wait=wait_of(frames_t), ending=STILL_RUNNING,
                           raw={"default_group": default if isinstance(default, bool) else None})
    read.recorded = _record_of(rank, fact.get("record"), node)
    return read


def _record_of(rank: int, record: Any, node: str) -> RankState | None:
    """Another node's flight record of a rank, through the same typed, bounded reading as a dump file's."""
    from ..evidence import flight_recorder
    from ..evidence.fr_dumps import plain_record

    if not isinstance(record, dict):
        return None
    fr = plain_record(record, f"the flight record of rank {rank} from {node}")
    if fr is None:
        return None
    fr["entries"] = fr["entries"][-MAX_RECORD_ENTRIES:]
    fr["comm_lib_version"] = _version(record.get("comm_lib_version"))
    return flight_recorder.rank_state(rank, fr, Source.FLIGHT_RECORDER, live=True)


def notes_of(doc: dict) -> list[str]:
    """Every node's notes (what a job named that attach did not use, and why), each with its node."""
    out = []
    for node, entry in sorted((doc.get("nodes") or {}).items()):
        facts = ((entry or {}).get("facts") or {}).get(CHECK) or {}
        notes = facts.get("notes") if isinstance(facts, dict) else None
        out += [f"{node}: {str(n)[:MAX_TEXT * 2]}" for n in (notes if isinstance(notes, list) else [])[:50]]
    return out


def reads_of(doc: dict) -> tuple[list[RankRead], dict[str, Any], list[str]]:
    """Every node's ranks from the master's cluster document, the first job seen, and the nodes with none."""
    return reads_from_facts({node: ((entry or {}).get("facts") or {}).get(CHECK) or {}
                             for node, entry in (doc.get("nodes") or {}).items()})


def reads_from_facts(facts_by_node: Mapping[str, Any]) -> tuple[list[RankRead], dict[str, Any], list[str]]:
    reads: list[RankRead] = []
    job: dict[str, Any] = {}
    empty = []
    for node, facts in sorted(facts_by_node.items()):
        facts = facts if isinstance(facts, dict) else {}
        ranks = facts.get("ranks") or []
        if not ranks:
            empty.append(node)
        if not job and isinstance(facts.get("job"), dict):
            job = facts["job"]
        reads += [r for r in (from_fact(f, node) for f in ranks[:4096]) if r is not None]
    return sorted(reads, key=lambda r: r.rank), job, empty


def parse_float(value: Any) -> float | None:
    """A finite, non-negative number from another node (a CPU share, bytes per second, seconds), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def watched_of(doc: dict) -> float:
    """The longest any node watched its ranks, from the master's cluster document."""
    return max((parse_float((((entry or {}).get("facts") or {}).get(CHECK) or {}).get("watched_s")) or 0.0
                for entry in (doc.get("nodes") or {}).values() if isinstance(entry, dict)), default=0.0)


def parse_world(job: dict | None, reads: list[RankRead]) -> int | None:
    """The job's world size as a node reported it, else one past the highest rank read."""
    return parse_int((job or {}).get("world_size"), hi=1 << 24) or (max(r.rank for r in reads) + 1 if reads else None)
