"""The software environment's facts that no job changes (torch's build, its CUDA, NCCL: what only `import torch`
tells), measured by the node's health check and kept per environment fingerprint, so that the prolog and the epilog
read them and never import torch (seconds on a loaded node, paid by every job).

``fingerprint`` says, without importing anything heavy, what would change those facts: the interpreter, every
installed distribution (its dist-info name holds the version, its mtime a reinstall in place), the size and mtime of
torch's and the CUDA/NCCL wheels' shared libraries (one replaced or truncated in place), the NVIDIA driver.
A new fingerprint has no kept facts: the prolog skips those checks with a note until the next health check
measures them again. Files: ``results_dir/<node>/.kept/<fingerprint>.json`` (a dot folder: the history and the
record pruning skip it), written by root and read only when root owns it and no one else can write it.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Iterable, Mapping

KIND = "ddpdoctor-kept-facts"
FOLDER = ".kept"
KEEP_FINGERPRINTS = 4  # environments kept per node: a rollback finds its facts still there
MAX_BYTES = 1 << 20
DRIVER_VERSION = "/proc/driver/nvidia/version"
INSTALLED = (".dist-info", ".egg-info", ".egg-link", ".pth")


def fingerprint(paths: Iterable[str] | None = None, driver: str = DRIVER_VERSION) -> str:
    """16 hex digits over what decides torch's facts here: the interpreter, each import path's installed
    distributions (name-version and mtime), the driver's version line. Reads directories, imports nothing."""
    h = hashlib.sha256()
    h.update(os.path.realpath(sys.executable).encode())
    h.update(sys.version.encode())
    for folder in (sys.path if paths is None else paths):
        try:
            names = sorted(n for n in os.listdir(folder or ".") if n.endswith(INSTALLED))
        except OSError:
            continue
        h.update(f"\0{folder}".encode())
        for name in names:
            try:
                mtime = os.stat(os.path.join(folder or ".", name)).st_mtime_ns
            except OSError:
                mtime = 0
            h.update(f"\0{name}:{mtime}".encode())
        for lib in _shared_libraries(folder or "."):
            h.update(f"\0{lib}".encode())
    try:
        with open(driver, "rb") as f:
            h.update(f.read(4096))
    except OSError:
        pass  # no NVIDIA driver: a CPU node
    return h.hexdigest()[:16]


def _shared_libraries(folder: str) -> list[str]:
    """'path:size:mtime' of each shared library torch and the pip CUDA/NCCL wheels load from ``folder``
    (torch/lib, nvidia/*/lib): a library truncated or replaced in place leaves the dist-info as it was (seen: a
    truncated libtorch_cpu.so judged from the facts of the torch that imported)."""
    dirs = [os.path.join(folder, "torch", "lib")]
    try:
        dirs += [os.path.join(folder, "nvidia", d, "lib") for d in sorted(os.listdir(os.path.join(folder, "nvidia")))]
    except OSError:
        pass  # no pip CUDA wheels here
    out = []
    for d in dirs:
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    if ".so" in e.name:
                        st = e.stat()
                        out.append(f"{e.path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            continue
    return sorted(out)


def path_of(results_dir: str, node: str, fp: str) -> Path:
    from ..documents import results_dir_name

    return Path(results_dir) / results_dir_name(node) / FOLDER / f"{fp}.json"


def facts_to_keep(doc: dict, imports_of: Mapping[str, tuple],
                  failing: tuple[str, ...] = ("fail",)) -> tuple[dict[str, dict], dict[str, str]]:
    """This run's facts of the checks that import something (``imports_of``: check -> its imports) where their
    gather succeeded and their result is not at a ``failing`` level, and the notes of those that skipped themselves
    (no CUDA here) or failed: what a prolog will not measure itself. A check skipped for the budget is not kept: it
    was not measured. A failing run's facts are never kept to judge by (the facts of a torch that did not import,
    judged by the prologs after the fix, undid the admin's resume): the prolog skips that check, saying so, and the
    next health check measures it again."""
    node = next(iter(doc.get("nodes") or {}), None)
    entry = (doc.get("nodes") or {}).get(node) or {}
    facts, gather = entry.get("facts") or {}, entry.get("gather") or {}
    ours = [name for name, imports in imports_of.items() if imports]
    failed = {r.get("check"): r.get("summary") for r in doc.get("results") or [] if r.get("level") in failing}
    ok = {name: facts[name] for name in ours if name not in failed
          and (gather.get(name) or {}).get("status") == "ok" and isinstance(facts.get(name), dict)}
    skipped = {name: str(gather[name].get("message") or "") for name in ours
               if (gather.get(name) or {}).get("status") == "skip" and not gather[name].get("for_time")}
    skipped.update({name: f"the last health check found it failing ({failed[name]}): not judged from its facts; "
                          "the next health check measures it again" for name in ours if name in failed})
    return ok, skipped


def save(results_dir: str, node: str, fp: str, facts: dict[str, dict], created: str,
         skipped: dict[str, str] | None = None) -> Path | None:
    """Write the kept facts atomically (a temp file renamed), the node's oldest fingerprints beyond
    KEEP_FINGERPRINTS removed; results_dir, the node's folder and .kept opened by descriptor, never through a
    link (as root each root's alone: UsageError). None: nothing to keep."""
    if not facts and not skipped:
        return None
    from .. import trust

    target = path_of(results_dir, node, fp)
    body = json.dumps({"kind": KIND, "fingerprint": fp, "created": created, "facts": facts,
                       "skipped": skipped or {}}, sort_keys=True)
    fd = trust.open_dirs(results_dir, [target.parent.parent.name, FOLDER], "node-check.results_dir", create=True)
    try:
        trust.write_at(fd, target.name, body.encode("utf-8"))
        _prune(fd)
    finally:
        os.close(fd)
    return target


def _prune(fd: int) -> None:
    """The oldest fingerprints' files beyond KEEP_FINGERPRINTS removed through .kept's descriptor."""
    try:
        times = {}
        for name in os.listdir(fd):
            if name.endswith(".json") and not name.startswith("."):
                times[name] = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime
        for old in sorted(times, key=times.get)[: max(0, len(times) - KEEP_FINGERPRINTS)]:
            os.unlink(old, dir_fd=fd)
    except OSError:
        pass  # housekeeping: the facts written are what counts


def load(results_dir: str, node: str, fp: str) -> tuple[dict | None, str]:
    """(the kept facts for this fingerprint or None, why not). Refused: a link on the way below results_dir, a
    file another user owns or can write (as root, only what root owns is trusted), a folder, one too large, too
    deep or not ours in shape: a bad file is no facts, never an error that ends the prolog's checks."""
    from .. import trust
    from ..errors import UsageError

    path = path_of(results_dir, node, fp)
    try:
        folder = trust.open_dirs(results_dir, [path.parent.parent.name, FOLDER], "node-check.results_dir")
    except FileNotFoundError:
        return None, "no facts kept for this environment yet"
    except (OSError, UsageError) as exc:
        return None, f"kept facts {path} not read: {getattr(exc, 'strerror', None) or exc}"
    try:
        fd = trust.open_nofollow(path.name, os.O_RDONLY, folder)
    except FileNotFoundError:
        return None, "no facts kept for this environment yet"
    except OSError as exc:
        return None, f"kept facts {path} not read: {exc.strerror or exc}"
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 \
                or trust.acl_refusal(fd):
            return None, f"kept facts {path} refused: not a regular file owned by this user and writable by it alone"
        if st.st_size > MAX_BYTES:
            return None, f"kept facts {path} refused: larger than {MAX_BYTES} bytes"
        data = _parse(os.read(fd, MAX_BYTES + 1))
    finally:
        os.close(fd)
    if data is None:
        return None, f"kept facts {path} do not parse"
    if not (isinstance(data, dict) and data.get("kind") == KIND and data.get("fingerprint") == fp
            and isinstance(data.get("facts"), dict)):
        return None, f"kept facts {path} are not ddpdoctor's for this environment"
    return data, ""


def _parse(raw: bytes):
    """The JSON, or None: not UTF-8, not JSON, nested too deep for the parser (50,000 brackets)."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
