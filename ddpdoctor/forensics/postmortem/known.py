"""What ddpdoctor already knew of a job before its postmortem: the verdict `attach` saved while the job hung
(`ddpdoctor-results/<run id>/attach.json`, or a node's `attach-<host>.json`), read as evidence, said as attach's.

Only a document of this job counts: kind "attach", the same run id, the job attach read having this log dir's
rendezvous id (or the run id itself: the scheduler's job id), taken after the job's last attempt started. And only
a file the reading user may trust: a regular file (no link followed), owned by that user or root and writable by
no one else; as root, root's alone, found through folders no other user can change (``trust``). Anything else is
a note, never evidence."""
from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ... import trust
from ...documents import ATTACH_WHOLE, results_dir_name
from ...errors import UsageError
from ..evidence.model import RankFailure

DOC_BYTES = 8 << 20  # an attach.json of 10,000 ranks with their stacks is a few MiB
START_SLACK_S = 5.0  # a folder's mtime and the attach's clock: the same machine or NTP-close nodes
HUNG = ("missing_rank", "missing_peer", "never_initialized", "desync", "process_stopped", "process_gone",
        "outside_collectives")  # the judge's categories that name the rank the others wait for


@dataclass
class AttachVerdict:
    """attach's saved verdict on this job: where it is, when it was taken, and its diagnosis (hang.verdict form)."""
    path: Path
    created: str
    diagnosis: dict

    @property
    def named(self) -> list[int]:
        return [r for r in self.diagnosis.get("named") or [] if isinstance(r, int) and not isinstance(r, bool)]

    def culprit(self, rank: int) -> dict:
        return next((c for c in self.diagnosis.get("culprits") or [] if isinstance(c, dict) and c.get("rank") == rank),
                    {})

    def root_cause(self, stopped_by: str | None) -> RankFailure:
        """The first rank attach named, as the root cause, said as attach's word while the job ran."""
        first = self.culprit(self.named[0])
        others = ", ".join(str(r) for r in self.named[1:])
        end = (f"then it was stopped from outside ({stopped_by})" if stopped_by
               else "no record after it shows a failure or a normal end")
        return RankFailure(
            rank=self.named[0], local_rank=None, host=first.get("host") or first.get("node"), exit_code=None,
            signal=stopped_by, category="hang", error_type="hung_when_attached", location=first.get("where"),
            message=(f"named by `ddpdoctor attach` at {self.created} while the job hung ({self.path}): "
                     f"{self.diagnosis.get('summary')}" + (f" (also named: rank(s) {others})" if others else "")
                     + f"; {end}"),
            fix=str(self.diagnosis.get("fix") or ""))


def attach_verdict(folders: list[Path], run_id: str, rdzv_ids: set[str], started: float | None,
                   notes: list[str]) -> AttachVerdict | None:
    """The verdict attach saved on this job in one of ``folders`` (the job's results folder), naming a rank: the
    whole job's (attach.json) first, else a node's part that named one. None when none is this job's, trusted and
    naming a rank; why a file was not used goes to ``notes``."""
    seen: set[Path] = set()
    for folder in folders:
        if folder in seen:
            continue
        seen.add(folder)
        for path in candidates(folder):
            doc = read_trusted(path, notes)
            if doc is None:
                continue
            why = not_this_job(doc, run_id, rdzv_ids, started)
            if why:
                notes.append(f"{path}: not used as evidence ({why})")
                continue
            found = AttachVerdict(path, str(doc.get("created")), doc["diagnosis"])
            if found.named:
                return found
    return None


def candidates(folder: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(folder))[:4096]
    except OSError:
        return []
    parts = [n for n in names if n.startswith("attach-") and n.endswith(".json")]
    return [folder / n for n in ([ATTACH_WHOLE] if ATTACH_WHOLE in names else []) + parts]


def read_trusted(path: Path, notes: list[str]) -> dict | None:
    """The JSON document at ``path`` when the reading user may trust it, else None with a note."""
    try:
        raw = read_own(path)
    except (UsageError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        notes.append(f"{path}: not used as evidence ({why})")
        return None
    try:
        doc = json.loads(raw[:DOC_BYTES + 1].decode("utf-8", "replace")) if len(raw) <= DOC_BYTES else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        notes.append(f"{path}: not used as evidence (not an attach document, or over {DOC_BYTES >> 20} MiB)")
        return None
    return doc


def read_own(path: Path) -> bytes:
    """The file's bytes: as root through ``trust`` (every folder on the way and the file root's alone); as a user,
    a regular file opened without following a link, owned by the user or root and writable by no one else (a shared
    results folder: another user's attach.json is theirs, not evidence)."""
    if trust.as_root():
        return trust.read_file(path, "attach's saved verdict", DOC_BYTES)
    fd = os.open(path, os.O_RDONLY | trust.NOFOLLOW | trust.CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        why = trust.why_untrusted(st, acl_of=fd)
        if why:
            raise UsageError(f"{why}: another user could have written it")
        return trust._read_capped(fd, DOC_BYTES)
    finally:
        os.close(fd)


def not_this_job(doc: dict, run_id: str, rdzv_ids: set[str], started: float | None) -> str | None:
    """Why an attach document is not one of this job's, or None."""
    if doc.get("kind") != "attach" or doc.get("schema") != "ddpdoctor":
        return "not an attach document"
    if results_dir_name(str(doc.get("run_id"))) != results_dir_name(run_id) or str(doc.get("run_id")) != run_id:
        return f"run id {doc.get('run_id')!r}, not {run_id!r}"
    key = str((doc.get("job") or {}).get("id") or "")
    job = key.split("@", 1)[0]
    if job not in rdzv_ids | {run_id} and job.split(".", 1)[0] not in rdzv_ids | {run_id}:
        return f"the job attach read ({key or 'none'}) is not this log dir's ({', '.join(sorted(rdzv_ids)) or run_id})"
    created = when(doc.get("created"))
    if created is None or (started is not None and created < started - START_SLACK_S):
        return f"taken at {doc.get('created')}, before this job's last attempt started"
    if doc.get("verdict") != "fail" or not isinstance(doc.get("diagnosis"), dict):
        return "attach found no hang"
    if doc["diagnosis"].get("category") not in HUNG:
        return f"attach's verdict ({doc['diagnosis'].get('category')}) names no rank the others waited for"
    return None


def when(iso) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None


def folders_of(results_root: Path | None, run_id: str, run_dir: Path) -> list[Path]:
    """Where the job's saved results are: ``<results root>/<run id>/`` (--results-dir), and the run dir of a
    run-trainer run (`<run>/logs/<node>`'s `<run>`) when it is named by the run id."""
    out = [results_root.absolute() / results_dir_name(run_id)] if results_root is not None else []
    if run_dir.name == results_dir_name(run_id):
        out.append(run_dir)
    return out
