"""The JSON that every command writes and the report reads: envelope, schema version, load/validate.

Every file ddpdoctor writes is one JSON object with this envelope::

    {"schema": "ddpdoctor", "schema_version": 1, "kind": "<kind>", "tool_version": "0.1.0",
     "run_id": "...", "created": "2026-11-22T14:00:00+00:00", ...kind-specific body...}

Kinds: "preflight" (one node or a whole cluster), "nccl-bench", "run-trainer". SCHEMA.md (beside this
module) documents each body. A reader accepts the same major schema_version only.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterable

from . import __version__
from .api import Level, Result
from .errors import UsageError
from .exitcodes import ExitCode
from .human import human_bytes
from .launchers import RUN_ID_VAR, RUN_JOB_ID_VARS
from .text import no_surrogates

SCHEMA = "ddpdoctor"
SCHEMA_VERSION = 1
KINDS = ("preflight", "nccl-bench", "run-trainer", "attach")
# attach's result for the whole job (the master's, or one node that read every rank); attach-<host>.json: a part
ATTACH_WHOLE = "attach.json"

# Where a run id comes from when a command is not given one: the workflow's own (--run-id sets it, so child
# processes share it), then the scheduler's job id, then torchrun's. preflight, nccl-bench and run-trainer of
# one job then carry the same id, and `report` merges them as one run.
RUN_ID_VARS = ("DDPDOCTOR_RUN_ID", *RUN_JOB_ID_VARS, RUN_ID_VAR)


def new_run_id() -> str:
    for var in RUN_ID_VARS:
        value = os.environ.get(var, "").strip()
        # "none": torchrun's --rdzv-id when none was given (c10d, static): no id, or every such job would share
        # ddpdoctor-results/none/, each result overwriting the last one's and `report` merging them as one run
        if value and not (var == RUN_ID_VAR and value == "none"):
            return value[:128]
    return uuid.uuid4().hex[:12]


def results_dir_name(run_id: str | None) -> str:
    """A run id as the name of its results directory: the id rule's characters (a scheduler's id such as
    PBS's `123.server[4]` may hold others), at most 64, never a hidden or parent name."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]", "-", str(run_id or "").strip())[:64].lstrip("._-") or "run"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def envelope(kind: str, run_id: str | None = None, **body: Any) -> dict:
    """A document: the envelope, then the body. A run-trainer or nccl-bench body carries text other
    processes wrote (log tails, exception messages, tracebacks, stacks): it is redacted here, where every
    such document is made, so run.json, the terminal view and the HTML report all get the redacted text; its
    rank lists are bounded here too (``rank_lists``: the first 64 and every rank as ranges).
    (A preflight's facts are scrubbed where they are gathered, and its messages are the checks' own words,
    which name flags such as --token in prose.)"""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    if kind != "preflight":
        from .rank_lists import bound_document
        from .redaction import redact_evidence

        # rank lists bounded first (a dump claiming 65,536 ranks: ranges, not 65,534 objects), then redacted
        body = redact_evidence(bound_document(kind, body))
    doc = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "tool_version": __version__,
        "run_id": run_id or new_run_id(),
        "created": now_iso(),
    }
    doc.update(body)
    return doc


def verdict_of(results: Iterable[Result]) -> Level:
    """The run's verdict: the worst level, where a skip alone still counts as a pass."""
    worst = Level.worst(r.level for r in results)
    return Level.PASS if worst is Level.SKIP else worst


def exit_code_of(verdict: Level) -> int:
    return ExitCode.FAIL if verdict is Level.FAIL else ExitCode.OK


def preflight_doc(
    *,
    scope: str,
    nodes: dict[str, dict],
    checks: list[dict],
    results: list[Result],
    run: dict,
    run_id: str | None = None,
    timings: dict | None = None,
) -> dict:
    """A preflight document. ``nodes`` maps node name -> {"rank", "host", "addr", "facts": {check: facts}}."""
    from .grouping import group_results

    verdict = verdict_of(results)
    ordered = [r.to_json() for r in sorted_results(results)]
    return envelope(
        "preflight",
        run_id=run_id,
        scope=scope,
        run=run,
        verdict=verdict.value,
        exit_code=exit_code_of(verdict),
        checks=checks,
        nodes=nodes,
        results=ordered,
        groups=group_results(ordered, len(nodes)),
        timings=timings or {},
    )


def sorted_results(results: Iterable[Result]) -> list[Result]:
    """Failures first, then warnings, skips, passes; stable by check name within a level."""
    return sorted(results, key=lambda r: (-r.level.severity, r.check, r.summary))


def dump(doc: dict, path: str | os.PathLike) -> Path:
    """Write a document atomically, so a reader never sees half a file."""
    return write_atomic(path, json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n")


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Temp file beside the target, then rename: the file is either the old one or the whole new one.

    A full disk, a quota, a read-only or forbidden directory: the temp file is removed and the error is a
    UsageError (exit 2) naming the path and the free space there, never a traceback or a stray .tmp file."""
    path = write_target(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:  # ENOSPC may surface at write or only at close
            fh.write(no_surrogates(text))  # a '\ud800' read from a file: UTF-8 cannot hold it
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise write_error(path, exc) from exc
    except BaseException:  # SIGTERM/SIGHUP/Ctrl-C mid-write: no .tmp left behind
        _remove_quietly(tmp)
        raise
    return path


def write_target(path: str | os.PathLike) -> Path:
    """Where a file named by the user is written: the path itself, or the file a link points to (the rename would
    replace the link). An existing target that is not a regular file is refused: the rename replaced it (`-o
    /dev/full` as root left an HTML file where the device was; `-o /dev/stdout` replaces the link)."""
    import stat

    path = Path(path)
    try:
        st = os.stat(path)
    except OSError:
        return path  # absent (or unreachable: the write says why)
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise UsageError(f"{path}: {what}, not a regular file; ddpdoctor writes its files whole (name a file)")
    return path.resolve() if path.is_symlink() else path


def write_error(path: Path, exc: OSError) -> UsageError:
    """'DIR/x.json: cannot write (No space left on device); 12 KiB free in DIR'."""
    where = next((p for p in (path.parent, *path.parent.parents) if p.exists()), Path("."))
    try:
        free = f"{human_bytes(shutil.disk_usage(where).free)} free in {where}"
    except OSError:
        free = f"free space in {where} unknown"
    return UsageError(f"{path}: cannot write ({exc.strerror or exc}); {free}")


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # never created, or the directory is gone: nothing left behind either way
        pass


def load(path: str | os.PathLike, budget=None) -> dict:
    """Read and validate a ddpdoctor document under the input policy (inputs.py: size cap, encoding, depth,
    values, and with ``budget`` the command's total); any problem is a UsageError naming the file."""
    from .inputs import load_json_file

    doc = load_json_file(path, budget=budget)
    validate(doc, str(path))
    return doc


def facts_shapes() -> dict[str, Any]:
    """The installed checks' declared facts shapes (``Check.facts_shape``), by check name."""
    from .registry import installed

    return {name: check.facts_shape for name, check in installed().items() if getattr(check, "facts_shape", None)}


def validate(doc: Any, name: str = "document") -> None:
    from .shapes import check_document

    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{name}: not a ddpdoctor result file (no \"schema\": \"{SCHEMA}\")")
    version = doc.get("schema_version")
    # bool is an int in Python: `"schema_version": true` would equal 1 without the explicit test.
    if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
        raise UsageError(f"{name}: unsupported schema_version {version!r} (this ddpdoctor reads {SCHEMA_VERSION})")
    if doc.get("kind") not in KINDS:
        raise UsageError(f"{name}: unknown kind {doc.get('kind')!r} (known: {', '.join(KINDS)})")
    if doc["kind"] == "preflight":
        for key in ("nodes", "results", "verdict"):
            if key not in doc:
                raise UsageError(f"{name}: preflight file lacks {key!r}")
        check_node_count(doc.get("nodes"), name)
    check_document(doc, name, facts_shapes())


def check_node_count(nodes: Any, name: str) -> None:
    """At most MAX_NODES nodes: no command makes a larger cluster (the largest built today are ~12,000 nodes),
    so more is not a ddpdoctor result, and reading it would cost the report a minute per million (10^6 empty
    nodes: 83 s)."""
    from .inputs import MAX_NODES

    if isinstance(nodes, dict) and len(nodes) > MAX_NODES:
        raise UsageError(f"{name}: {len(nodes):,} nodes, more than the {MAX_NODES:,} of the largest cluster any "
                         "ddpdoctor command runs; not a ddpdoctor result")


def own_results(doc: dict) -> list[dict]:
    """What only this node saw, in a worker's cluster preflight document: it repeats the master's results (their
    count is ``master.results``), then adds its own (messages it refused). [] for any other document."""
    master = doc.get("master") if isinstance(doc.get("master"), dict) else {}
    copied = master.get("results")
    if doc.get("role") != "worker" or not isinstance(copied, int) or isinstance(copied, bool):
        return []
    return list(doc.get("results") or [])[copied:]
