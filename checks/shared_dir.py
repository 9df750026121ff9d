"""shared-dir: a directory every node must share (checkpoints, data caches): the master writes a nonce,
every node must read it back within a time limit; the nodes that cannot are named with their filesystem.
The protocol's exchange step carries the nonce (``publishes``: the master's ``publish`` writes the file)."""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from shlex import quote

from ddpdoctor.api import Check, Option, Skip, per_node


def filesystem_of(path: str) -> dict:
    """Filesystem type and mount point holding ``path`` (psutil's partition table, longest mount prefix)."""
    import psutil

    real = os.path.realpath(path)
    best = None
    for part in psutil.disk_partitions(all=True):
        mp = part.mountpoint
        if real == mp or real.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) > len(best.mountpoint):
                best = part
    return {"fstype": best.fstype if best else None, "mountpoint": best.mountpoint if best else None}


class SharedDirCheck(Check):
    name = "shared-dir"
    description = "--shared-dir is the same directory on every node (the master's nonce is visible everywhere)"
    phase = "cluster"
    options = {"visible_within_s": Option(10.0, "seconds a node may take to see the master's file")}
    publishes = True  # the master writes the file and publishes its nonce; every node reads it back

    def publish(self, ctx) -> dict | None:
        view = ctx.cluster
        if not view.shared_dir:
            return None
        nonce = secrets.token_hex(16)
        path = Path(view.shared_dir) / f".ddpdoctor-shared-{nonce[:8]}"
        def undo() -> None:
            path.unlink(missing_ok=True)

        view.on_close(undo)  # before it exists: a SIGTERM during the write still removes it
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, nonce.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            view.cleanups.remove(undo)  # not ours to remove (O_EXCL: it may be someone else's file)
            return {"nonce": f"unwritable: {exc}", "file": path.name}
        return {"nonce": nonce, "file": path.name}

    def gather(self, ctx) -> dict:
        view = ctx.cluster
        if not view.shared_dir:
            raise Skip("no --shared-dir given")
        published = view.published.get(self.name) or {}
        nonce = str(published.get("nonce") or published.get("error") or "")
        facts = {"path": view.shared_dir, **filesystem_of(view.shared_dir), "seen": False, "seconds": None}
        if nonce.startswith("unwritable") or published.get("error"):
            facts["error"] = f"the master could not write there: {nonce}"
            return facts
        target = Path(view.shared_dir) / f".ddpdoctor-shared-{nonce[:8]}"
        start = time.monotonic()
        limit = ctx.opts["visible_within_s"]
        while True:  # NFS attribute caches can delay a new file: poll, bounded by the option
            try:
                if target.read_text() == nonce:
                    facts.update(seen=True, seconds=round(time.monotonic() - start, 3))
                    break
            except OSError:
                pass
            if time.monotonic() - start >= limit:
                break
            time.sleep(0.2)
        if view.me["name"] == view.master["name"]:
            facts["writer"] = True
        return facts

    def compare(self, facts_by_node, opts):
        def judge(node, f):
            where = f"{f.get('path')} ({f.get('fstype') or 'unknown fs'} at {f.get('mountpoint') or '?'})"
            if f.get("error"):
                yield self.fail(f"shared dir {where}: {f['error']}", [node], actual=f["error"],
                                expected="the master can write the nonce", fix="make the directory writable on the master")
            elif f.get("seen"):
                yield self.passed(f"{node} sees the master's file in {where} after {f.get('seconds')} s", [node])
            else:
                yield self.fail(
                    f"{node} cannot see the master's file in {where}: the path is node-local there", [node],
                    actual=f"not visible after {opts['visible_within_s']} s", expected="visible on every node",
                    fix=f"mount shared storage (NFS, Lustre, ...) at {quote(str(f.get('path')))} on {node}, or save "
                        f"checkpoints per node / on global rank 0 only and gate downloads on LOCAL_RANK == 0",
                )

        return per_node(facts_by_node, judge)
