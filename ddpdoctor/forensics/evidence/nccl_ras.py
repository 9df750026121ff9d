"""NCCL RAS (NCCL >= 2.28.7: ``ncclras -f json``, port 28028 on localhost) as evidence: each communicator's
missing ranks with host, pid and GPU, which of them are unresponsive (~5 s) or considered dead (~60 s), fused
with what the flight records and stacks named; "RAS healthy while the ranks disagree" said as such (NCCL's RAS
sees only its own communicators: nccl#1730).

The JSON's shape, as NCCL 2.28-2.30 write it (and Ray Train's tests record it): ``nccl_version``, a list of
``communicators``, each with its ``hash``, ``size``, ``ranks`` and ``missing_ranks`` (``rank``, ``host``, ``pid``,
``cuda_dev``, ``nvml_dev``, and ``status``: ``unresponsive``, ``considered_dead``). NCCL 2.28.9 leaves out the comma
before a missing rank's ``status``: the line break between a value and the next key is given its comma
(``repaired``). A rank there is the communicator's own: only a communicator as large as the job's world (its ranks
are the job's) is fused with the culprits. Not checked against a running ncclras here (no GPU)."""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

MIN_NCCL = (2, 28, 7)
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RasRank:
    rank: int
    host: str | None = None
    pid: int | None = None
    gpu: str | None = None
    unresponsive: bool = False
    dead: bool = False


@dataclass(frozen=True)
class RasComm:
    comm: str
    ranks: int
    missing: tuple[RasRank, ...]


@dataclass(frozen=True)
class RasReport:
    comms: tuple[RasComm, ...]
    version: str | None = None   # RAS's own nccl_version

    @property
    def missing(self) -> tuple[RasRank, ...]:
        seen: dict[int, RasRank] = {}
        for c in self.comms:
            for r in c.missing:
                seen.setdefault(r.rank, r)
        return tuple(seen[r] for r in sorted(seen))

    @property
    def healthy(self) -> bool:
        return bool(self.comms) and not self.missing

    def world(self, size: int | None) -> "RasReport":
        """The communicators whose ranks are the job's: as large as its world (``size``), else the largest."""
        largest = max((c.ranks for c in self.comms), default=0)
        keep = size if size and any(c.ranks == size for c in self.comms) else largest
        return RasReport(tuple(c for c in self.comms if c.ranks == keep), self.version)


VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def supported(nccl_version: str | None) -> bool | None:
    """RAS's JSON exists from NCCL 2.28.7; None: the version is not known (then RAS is asked: an older NCCL's
    ncclras refuses ``-f`` at once)."""
    m = VERSION.search(str(nccl_version or ""))
    return tuple(int(g) for g in m.groups()) >= MIN_NCCL if m else None


# a value (a number, a string's quote, true/false's e, null's l) and the next line's key with no comma between
MISSING_COMMA = re.compile(r'([0-9"el])([ \t]*\r?\n[ \t]*)("[^"\n]*"[ \t]*:)')


def repaired(text: str) -> str:
    return MISSING_COMMA.sub(r"\1,\2\3", text)


def parse(raw: str | bytes) -> RasReport | None:
    """``ncclras -f json``'s output as a RasReport; None when it is not JSON of that shape."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = json.loads(repaired(text))
        except ValueError:
            return None
    comms = data.get("communicators") if isinstance(data, dict) else None
    if not isinstance(comms, list):
        return None
    out = []
    for i, c in enumerate(comms):
        if not isinstance(c, dict):
            continue
        missing = tuple(r for r in (_rank(m) for m in c.get("missing_ranks") or []) if r is not None)
        ranks = c.get("ranks")
        count = _int(c.get("size")) or (len(ranks) + len(missing) if isinstance(ranks, list) else 0)
        out.append(RasComm(str(c.get("hash") or i), count, missing))
    version = data.get("nccl_version")
    return RasReport(tuple(out), str(version) if version else None)


def _rank(m) -> RasRank | None:
    if not isinstance(m, dict) or _int(m.get("rank")) is None:
        return None
    status = m.get("status") if isinstance(m.get("status"), dict) else {}
    gpu = m.get("cuda_dev", m.get("nvml_dev"))
    return RasRank(_int(m["rank"]), str(m["host"]) if m.get("host") else None, _int(m.get("pid")),
                   str(gpu) if gpu is not None else None, bool(status.get("unresponsive")),
                   bool(status.get("considered_dead")))


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def ask(exe: str, timeout: float = TIMEOUT_S) -> RasReport | str:
    """``ncclras -f json`` on this node (``exe``: trust.program's), bounded: its report, else why not."""
    try:
        done = subprocess.run([exe, "-f", "json"], capture_output=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return (f"no answer within {timeout:g} s (RAS off with NCCL_RAS_ENABLE=0, or another port: "
                "NCCL_RAS_ADDR)")
    except OSError as exc:
        return f"{exe} could not run ({exc.strerror or exc})"
    if done.returncode != 0:
        return f"{exe} -f json exited {done.returncode} (an NCCL before 2.28.7 has no -f json)"
    return parse(done.stdout) or "it answered, not in the JSON shape NCCL 2.28-2.30 write"


@dataclass(frozen=True)
class RasFusion:
    """RAS beside the judge's culprits: ``agrees`` (RAS's missing ranks are the culprits), ``ras_only`` (missing
    in RAS, not named by the records), ``healthy_while_disagree`` (RAS sees every rank while the records name a
    culprit: NCCL's view is not the whole job's)."""
    missing: tuple[RasRank, ...]
    agrees: bool
    ras_only: tuple[int, ...]
    healthy_while_disagree: bool


def fuse(report: RasReport, culprits: list[int]) -> RasFusion:
    """RAS's missing/dead ranks fused with the culprits the flight records and stacks named."""
    missing = report.missing
    ids = {r.rank for r in missing}
    return RasFusion(missing, bool(ids) and ids == set(culprits), tuple(sorted(ids - set(culprits))),
                     report.healthy and bool(culprits))


def nccl_version(records: dict[int, dict | None]) -> tuple[bool, str | None]:
    """(the job runs NCCL, its version) from its ranks' flight records: an entry named ``nccl:``/``nccl2:``, and
    the record's ``comm_lib_version`` (torch's FlightRecorderDetail.hpp writes ProcessGroupNCCL's NCCL version
    there; gloo leaves it empty)."""
    nccl, version = False, None
    for fr in records.values():
        if not isinstance(fr, dict):
            continue
        version = version or (str(fr["comm_lib_version"]) if fr.get("comm_lib_version") else None)
        nccl = nccl or any(isinstance(e, dict) and str(e.get("profiling_name", "")).startswith("nccl")
                           for e in fr.get("entries") or [])
    return nccl, version


def consult(records: dict[int, dict | None], culprits: list[int], asker=ask, program=None,
            world: int | None = None) -> dict | None:
    """NCCL RAS on a hang, for the verdict document: asked where the job runs NCCL (not one older than 2.28.7,
    where the records say its version) and a ``ncclras`` this process may run is on this node, fused with the
    ``culprits`` the records and stacks named; else why it was not asked. None: no NCCL in the records (gloo: RAS
    has nothing to say). ``program``: trust.program's answer, ``world``: the job's world size."""
    from ... import trust

    nccl, version = nccl_version(records)
    if not nccl:
        return None
    out: dict = {"nccl_version": version, "asked": False, "answered": False}
    if supported(version) is False:
        out["said"] = f"NCCL RAS not asked: NCCL {version} (its JSON needs NCCL >= {'.'.join(map(str, MIN_NCCL))})"
        return out
    exe, why = program if program is not None else trust.program("ncclras")
    if exe is None:
        out["said"] = f"NCCL RAS not asked: {why} (it comes with NCCL's tools)"
        return out
    out["asked"] = True
    report = asker(exe)
    if isinstance(report, str):
        out["said"] = f"NCCL RAS asked: {report}"
        return out
    out["nccl_version"] = version or report.version
    fused = fuse(report.world(world), culprits)
    out.update(answered=True, missing=[_rank_json(r) for r in fused.missing], agrees=fused.agrees,
               ras_only=list(fused.ras_only), healthy_while_disagree=fused.healthy_while_disagree,
               said=_said(fused, culprits))
    return out


def _rank_json(r: RasRank) -> dict:
    return {"rank": r.rank, "host": r.host, "pid": r.pid, "gpu": r.gpu, "unresponsive": r.unresponsive,
            "dead": r.dead}


def _who(ranks: tuple[RasRank, ...]) -> str:
    return ", ".join(f"rank {r.rank}" + (f" on {r.host}" if r.host else "") + (f" pid {r.pid}" if r.pid else "")
                     + (f" GPU {r.gpu}" if r.gpu is not None else "")
                     + (" (considered dead)" if r.dead else " (unresponsive)" if r.unresponsive else "")
                     for r in ranks)


def _said(fused: RasFusion, culprits: list[int]) -> str:
    """One sentence: RAS beside the records' verdict."""
    if fused.healthy_while_disagree:
        return ("NCCL RAS reports every rank of its communicators healthy while the ranks disagree: RAS sees only "
                "NCCL's own view (nccl#1730), so the records' culprit stands")
    if fused.agrees:
        return f"NCCL RAS agrees: {_who(fused.missing)} missing"
    if not fused.missing:
        return "NCCL RAS reports no missing rank"
    also = [r for r in fused.missing if r.rank in fused.ras_only]
    if culprits:
        return f"NCCL RAS reports {_who(tuple(also))} missing too, which the records did not name"
    return f"NCCL RAS reports {_who(fused.missing)} missing"
