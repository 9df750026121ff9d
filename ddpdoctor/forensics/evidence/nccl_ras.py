"""NCCL RAS (NCCL >= 2.28.7: ``ncclras -f json``, port 28028 on localhost) as evidence: each communicator's
missing ranks with host, pid and GPU, which of them are unresponsive (~5 s) or considered dead (~60 s), fused
with what the flight records and stacks named; "RAS healthy while the ranks disagree" said as such (NCCL's RAS
sees only its own communicators: nccl#1730).

The JSON's shape is read tolerantly, as NCCL's docs/userguide troubleshooting/ras.rst describes it: a list of
communicators (``communicators``), each with its ``ranks`` and ``missing_ranks`` (``rank``, ``host``, ``pid``,
``cuda_dev``, ``nvml_dev``, ``unresponsive``, ``considered_dead``). It has not been checked against a running
ncclras here (no GPU): a field named otherwise is not seen, never guessed."""
from __future__ import annotations

import json
import shutil
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


def supported(nccl_version: str | None) -> bool:
    """RAS's JSON exists from NCCL 2.28.7."""
    try:
        return tuple(int(p) for p in str(nccl_version).split(".")[:3]) >= MIN_NCCL
    except ValueError:
        return False


def parse(raw: str | bytes) -> RasReport | None:
    """``ncclras -f json``'s output as a RasReport; None when it is not JSON of that shape."""
    try:
        data = json.loads(raw)
    except (ValueError, TypeError):
        return None
    comms = data.get("communicators") if isinstance(data, dict) else data
    if not isinstance(comms, list):
        return None
    out = []
    for i, c in enumerate(comms):
        if not isinstance(c, dict):
            continue
        missing = tuple(r for r in (_rank(m) for m in c.get("missing_ranks") or []) if r is not None)
        ranks = c.get("ranks")
        count = len(ranks) if isinstance(ranks, list) else _int(c.get("nranks")) or 0
        out.append(RasComm(str(c.get("comm_hash") or c.get("id") or i), count, missing))
    return RasReport(tuple(out))


def _rank(m) -> RasRank | None:
    if not isinstance(m, dict) or _int(m.get("rank")) is None:
        return None
    gpu = m.get("cuda_dev", m.get("nvml_dev"))
    return RasRank(_int(m["rank"]), str(m["host"]) if m.get("host") else None, _int(m.get("pid")),
                   str(gpu) if gpu is not None else None, bool(m.get("unresponsive")), bool(m.get("considered_dead")))


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def ask(timeout: float = TIMEOUT_S) -> RasReport | None:
    """``ncclras -f json`` on this node, bounded; None when it is not installed, does not answer in time or says
    nothing readable."""
    exe = shutil.which("ncclras")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-f", "json"], capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse(done.stdout) if done.returncode == 0 else None


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
