"""The judge's entry for flight-recorder dumps a finished job left (with the ranks' failure records): the same
verdict as a live hang's, from the files, typed (``Judged``); worded only by ``Judged.to_json`` and the words
attribution and the stop rule put in a root cause."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..evidence import torchrun_files
from ..evidence.fr_dumps import job_ranks, missing_dumps, unknown_version, version_of
from ..evidence.model import JobEvidence
from . import words
from .graph import judge
from .verdict import Category, Culprit, Verdict


@dataclass
class Judged:
    """The dumps' verdict as data: the judge's Verdict, the evidence it was decided on, where it came from."""
    verdict: Verdict
    evidence: JobEvidence
    source: str
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the dumps could not tell (dump_notes)

    @property
    def category(self) -> Category:
        return self.verdict.category

    @property
    def culprits(self) -> list[Culprit]:
        return list(self.verdict.culprits)

    @property
    def legacy_class(self) -> str:
        return words.LEGACY_CLASS.get(self.category, self.category.value)

    def summary(self) -> str:
        return words.summary(self.verdict, self.evidence)

    def fix(self) -> str:
        return words.fix(self.verdict)

    def place(self, culprit: Culprit) -> dict:
        """Where a culprit stands as the document says it: host, where, last_seen(_where), ended."""
        return words.culprit_json(culprit, self.evidence)

    def call_site(self, rank: int) -> str | None:
        """The file:line of a rank's own call in a mismatch (its call differs from the majority's)."""
        return words.call_site(self.verdict, rank, self.evidence)

    def op_of(self, rank: int) -> str | None:
        call = self.verdict.calls.get(rank) or self.verdict.call
        return call.op if call is not None else None

    def seq(self) -> int | None:
        call = self.verdict.call
        return call.seq if call is not None and call.numbered else None

    def to_json(self) -> dict:
        out = words.to_json(self.verdict, self.evidence)
        out["source"] = self.source
        out["files"] = dict(self.files)
        out["notes"] = list(out.get("notes") or []) + list(self.notes)  # the judge's own (sizes), then the dumps'
        return out


MAX_LISTED = 16  # ranks named in a note; a dump claiming 65,536 ranks gives a count, not a 400 KB line


def dump_notes(dumps: dict[int, tuple[Path, dict]]) -> list[str]:
    """What the verdict must say of the dumps themselves: the job's ranks that left none (evidence: a rank dead,
    hung hard or already in destroy_process_group() writes none, pytorch#196968) and a format version this
    reader does not know (read as the one it knows)."""
    out = []
    missing = missing_dumps(dumps)
    if missing:
        shown = ", ".join(map(str, missing[:MAX_LISTED])) + (f" and {len(missing) - MAX_LISTED} more"
                                                              if len(missing) > MAX_LISTED else "")
        out.append(f"rank{'s' if len(missing) > 1 else ''} {shown} left no flight-recorder "
                   "dump: dead, hung hard or already shutting down when the others wrote theirs (its record is "
                   "not part of this verdict)")
    odd = sorted({version_of(fr) for _, fr in dumps.values() if unknown_version(fr)})
    if odd:
        out.append(f"flight-record version {', '.join(odd)} is not one this ddpdoctor knows; read with the fields "
                   "of 2.10")
    return out


def judge_dumps(dumps: dict[int, tuple[Path, dict]], failures: list | None = None, stacks_dir: Path | None = None,
                world: list[int] | None = None) -> Judged | None:
    """The hang verdict (the one judge) from what a finished job left: the dumps (which may
    have been written after a timeout: gloo then counts the timed-out collective as completed, so the ranks'
    last sequence ids and calls are compared), the ranks' failure records (``failures``: how each ended, where
    its traceback stands, the store keys a timed-out init waited for), the stacks at the launcher's SIGTERM
    (``stacks_dir``) and every rank of the job (``world``, with the dumps' pg_config). Without dumps the
    verdict counts only where the records' waits name a rank (init/store keys, a send/recv peer): else None."""
    if not dumps and not failures:
        return None
    ranks = sorted(set(job_ranks(dumps) if dumps else []) | set(world or []))
    job = torchrun_files.job_after(failures or [], dumps, stacks_dir, ranks)
    found = judge(job)
    if not dumps and (not found.culprits or not all(c.named for c in found.culprits)
                      or found.category.value in ("missing_rank", "outside_collectives", "unknown")):
        return None  # the logs alone place no rank: attribution's own reading of them stands
    return Judged(found, job, "flight-recorder dumps" if dumps else "the ranks' records",
                  {str(r): str(p) for r, (p, _) in sorted((dumps or {}).items())}, dump_notes(dumps or {}))
