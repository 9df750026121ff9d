"""The node check's records that could not be kept, carried from run to run where no Prometheus textfile is
configured (issue 56.6: nothing silent): one small JSON file per node in ``state_dir`` (default /run/ddpdoctor, a
tmpfs: a full results disk does not stop it). The next record kept carries the count, since when and why
(``node_check.records_not_kept``: a row on the history page), then the file goes. As root the folder is root's
alone and every file in it is opened by descriptor, no link followed (trust.open_dir); concurrent checks update
it under a bounded lock. Lost at a reboot, like the count's own meaning: since the last record kept."""
from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import math
import os
import re
import time

from .. import trust
from ..errors import UsageError

MAX_BYTES = 4096        # the file holds three values: anything larger is not ours
LOCK_WAIT_S = 2.0       # two checks at once on a node (a prolog and the health check) wait this long for each other
LOCK_POLL_S = 0.05
WHY_CHARS = 200


NODE = re.compile(r"[A-Za-z0-9._-]{1,200}")  # a file name, never a path (node_check.refuse_odd_name's rule)


def _name(node: str) -> str:
    if not NODE.fullmatch(node or "") or node.startswith("."):
        raise OSError(errno.EINVAL, f"node name {node[:60]!r} is no file name")
    return f"unkept-{node}.json"


def load(state_dir: str, node: str, notes: list[str]) -> dict:
    """The count carried for ``node`` (``count``, ``why``, ``since_s``, ``since``), {} when none or unreadable
    (a note says why, never an exception: the check's verdict does not depend on it)."""
    try:
        fd = trust.open_dir(state_dir, "state_dir")
    except FileNotFoundError:
        return {}
    except (OSError, UsageError) as exc:
        notes.append(f"state_dir {state_dir}: not read ({getattr(exc, 'strerror', None) or exc}); a count of "
                     "records not kept is not carried")
        return {}
    try:
        return _parse(trust.read_regular_at(fd, _name(node), MAX_BYTES))
    except OSError as exc:
        notes.append(f"state_dir {state_dir}: not read ({exc.strerror or exc}); a count of records not kept is not "
                     "carried")
        return {}
    finally:
        os.close(fd)


def store(state_dir: str, node: str, pending: dict, notes: list[str]) -> None:
    """This run's count written for the next (``pending``: the record's ``unkept_pending``; count 0 removes the
    file). The count is re-read under the lock: another check that failed to keep its record meanwhile counts."""
    count = pending.get("count") or 0
    try:
        fd = trust.open_dir(state_dir, "state_dir", create=bool(count))
    except FileNotFoundError:
        return  # nothing to clear
    except (OSError, UsageError) as exc:
        notes.append(f"state_dir {state_dir}: not written ({getattr(exc, 'strerror', None) or exc}); "
                     f"{count} record(s) not kept are said only here")
        return
    try:
        with _locked(fd, node):
            if not count:
                _remove(fd, _name(node))
                return
            now = _parse(trust.read_regular_at(fd, _name(node), MAX_BYTES))  # {}: a record was kept meanwhile
            merged = {"count": now.get("count", 0) + 1,
                      "why": now.get("why") or str(pending.get("why") or "")[:WHY_CHARS],
                      "since_s": now.get("since_s") or time.time()}
            trust.write_at(fd, _name(node), json.dumps(merged).encode(), mode=0o600)
    except OSError as exc:
        notes.append(f"state_dir {state_dir}: not written ({exc.strerror or exc}); {count} record(s) not kept are "
                     "said only here")
    finally:
        os.close(fd)


class _locked:
    """An flock on the node's lock file in the folder, waited for at most LOCK_WAIT_S (then OSError: EAGAIN)."""

    def __init__(self, dir_fd: int, node: str):
        self.fd = trust.open_nofollow(_name(node) + ".lock", os.O_RDWR | os.O_CREAT, dir_fd, 0o600)

    def __enter__(self):
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(self.fd)
                    raise OSError(errno.EAGAIN, f"its lock was held past {LOCK_WAIT_S:g} s") from None
                time.sleep(LOCK_POLL_S)

    def __exit__(self, *exc):
        os.close(self.fd)  # closing releases the lock


def _remove(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _parse(raw: bytes | None) -> dict:
    """The three values, validated (a file someone else wrote, or a half-written one, is no count)."""
    if not raw or len(raw) > MAX_BYTES:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    count, since_s, why = data.get("count"), data.get("since_s"), data.get("why")
    if not (isinstance(count, int) and not isinstance(count, bool) and 0 < count < 1 << 31):
        return {}
    if not (isinstance(since_s, (int, float)) and not isinstance(since_s, bool) and math.isfinite(since_s)
            and 0 < since_s < 1 << 34):
        return {}
    since = _dt.datetime.fromtimestamp(since_s, _dt.timezone.utc).isoformat(timespec="seconds")
    return {"count": count, "why": why[:WHY_CHARS] if isinstance(why, str) else "", "since_s": float(since_s),
            "since": since}
