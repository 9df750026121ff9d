"""What a job names (its dump pipe, its dump file, its worker socket, the launcher's record of a rank it holds
open), touched only with that job's rights and only when it is what it claims: the one place attach acts on a
path a job gave.

attach runs as root beside other users' jobs, and a job's environment is written by whoever started it. So
every such path is used in a child process that has dropped to the rank's own uid and gid (no supplementary
groups; forked, never exec'd: nothing but this module's code runs there, and the kernel makes the child
non-dumpable, so the job cannot trace it), and in that child only when:

- it is reached without a link (each component opened with O_NOFOLLOW from the folder before it; a folder's
  link is followed only when root owns it, the system's own layout such as /var/run -> /run; the last
  component never), from / or, for a relative path, from the rank's own working folder;
- it belongs to the rank's uid, and is what it claims: a FIFO the rank's process holds open (per
  /proc/PID/fd), a regular file, a socket the rank's process listens on whose peer (SO_PEERCRED) is that pid.
  Each check is made on the descriptor that is then used (O_PATH, fstat, reopened through /proc/self/fd), so
  nothing can be swapped in between; a FIFO or socket of someone else is never even opened (job_paths.py: what
  the child does).

Anything else is skipped with one note (``take_notes``) saying which rank named what and why; what is simply
not there (no dump yet, torch has not opened its pipe) is no note. Every child is bounded by a timeout and
killed past it; what it found comes back as bytes over a pipe, never as an object to run.
"""
from __future__ import annotations

import os
import select
import signal
import struct
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from ...launchers import ray
from .job_paths import MAX_FDS, Absent, RankLike, Refused, ask_socket, held_head

MAX_NOTES = 50
WHY = "attach acts on what a job names only with the job's rights"


# ---------------------------------------------------------------- notes
_notes: list[tuple[int, str]] = []  # one attach run's (its threads'), taken by the document
_notes_lock = threading.Lock()


def note(rank: int, text: str, who: str | None = None, why: str | None = WHY) -> None:
    """``who``: the process as the note names it where its rank is not known yet (a Ray worker being read);
    ``why``: what it was not used for (None: the note says it all)."""
    line = f"{who or f'rank {rank}'}: {text}" + (f"; not used ({why})" if why else "")
    with _notes_lock:
        if (rank, line) not in _notes and len(_notes) < MAX_NOTES:
            _notes.append((rank, line))


def take_notes() -> list[str]:
    """The notes made since the last call (one attach run's), by rank, and forget them."""
    with _notes_lock:
        out = [line for _, line in sorted(_notes, key=lambda n: n[0])]
        _notes.clear()
    return out


# ---------------------------------------------------------------- the child with the job's rights
_OK, _ABSENT, _REFUSED = b"O", b"A", b"R"
_HEADER = struct.Struct("!cQ")


def as_job(rp: RankLike, work: Callable[[], bytes], timeout: float, cap: int = 1 << 20) -> bytes | None:
    """``work()``'s bytes, run in a child process with the rank's uid and gid; None when it found nothing
    (Absent), refused what it found (Refused: noted), could not take the job's rights, or ran past ``timeout``
    seconds (then killed). At most ``cap`` bytes come back."""
    who = getattr(rp, "who", None)
    if rp.uid is None or rp.gid is None:
        note(rp.rank, "the user of its process is unknown", who)
        return None
    if os.geteuid() not in (0, rp.uid):
        note(rp.rank, f"attach runs as uid {os.geteuid()}, the job as uid {rp.uid}: only root or the job's "
                      "user may act for it", who)
        return None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into attach's own code
        try:
            os.close(r)
            _child(w, rp, work, cap)
        finally:
            os._exit(0)
    os.close(w)
    try:
        got = _read_answer(r, time.monotonic() + timeout + 1.0, cap)
    finally:
        os.close(r)
        _reap(pid)
    if got is None:
        return None  # ran past its time (killed), or died: what it was doing is not trusted
    kind, payload = got
    if kind == _OK:
        return payload
    if kind == _REFUSED:
        note(rp.rank, payload.decode("utf-8", "replace"), who)
    return None


def _child(w: int, rp: RankLike, work: Callable[[], bytes], cap: int) -> None:
    os.closerange(3, w)  # other threads' files, sockets and children's pipes: not the job's to have
    os.closerange(w + 1, 1 << 20)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_DFL)  # Ctrl-C ends it, never attach's own handler
        except ValueError:
            pass
    try:
        _drop_to(rp.uid, rp.gid)
        kind, payload = _OK, work()[:cap]
    except Absent:
        kind, payload = _ABSENT, b""
    except Refused as exc:
        kind, payload = _REFUSED, str(exc).encode("utf-8", "replace")[:4096]
    except OSError as exc:
        kind, payload = _REFUSED, str(Refused(str(exc.filename or "-"), exc.strerror or type(exc).__name__)).encode()
    _write_all(w, _HEADER.pack(kind, len(payload)) + payload)


def _drop_to(uid: int, gid: int) -> None:
    """The job's uid and gid, no supplementary group (as root; as the job's own user there is nothing to drop)."""
    if os.geteuid() == 0 and uid != 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)  # as root: real, effective and saved ids all become the job's; no way back
    if os.geteuid() != uid or os.getuid() != uid:
        raise Refused("-", f"could not take the job's user, uid {uid}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_answer(fd: int, deadline: float, cap: int) -> tuple[bytes, bytes] | None:
    buf = bytearray()
    need = _HEADER.size
    poller = select.poll()  # not select(): a descriptor above 1023 is legal here
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while len(buf) < need:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(fd, min(1 << 20, need - len(buf)))
        if not chunk:
            return None
        buf += chunk
        if need == _HEADER.size and len(buf) >= need:
            kind, size = _HEADER.unpack(bytes(buf[:_HEADER.size]))
            if size > cap + 4096:
                return None
            need += size
    kind, _ = _HEADER.unpack(bytes(buf[:_HEADER.size]))
    return kind, bytes(buf[_HEADER.size:])


def _reap(pid: int) -> None:
    """The child ends at once after its answer; one that did not answer in time is killed."""
    for _ in range(50):
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.01)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


# ---------------------------------------------------------------- in attach: facts about the rank itself
def listens_on(pid: int, path: str) -> bool:
    """Whether process ``pid`` holds a listening unix socket bound at ``path`` (its /proc/PID/net/unix row,
    and a descriptor of that socket among its own): run-trainer's worker server is in the rank itself. Read
    from /proc, not from the path: nothing the job named is touched."""
    inodes = set()
    try:
        for name in os.listdir(f"/proc/{pid}/fd")[:MAX_FDS]:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        with open(f"/proc/{pid}/net/unix", "rb") as fh:
            rows = fh.read(16 << 20).decode("utf-8", "replace").splitlines()[1:]
    except OSError:
        return False
    for row in rows:
        cols = row.split(None, 7)
        # Num RefCount Protocol Flags Type St Inode Path: a listening socket has __SO_ACCEPTCON (0x10000)
        if len(cols) == 8 and cols[6] in inodes and cols[7] == path and int(cols[3], 16) & 0x10000:
            return True
    return False


def held_paths(pid: int, wanted: Callable[[str], bool]) -> list[str]:
    """The paths of the files process ``pid`` holds open that ``wanted`` names (a launcher's own record of the
    rank: Ray Train's worker log), from its /proc/PID/fd links; nothing is opened here (the file is read with
    the job's rights: ``held_file_head``)."""
    out = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")[:MAX_FDS]
    except OSError:
        return []
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("/") and not target.endswith(" (deleted)") and wanted(target) and target not in out:
            out.append(target)
    return out


# ---------------------------------------------------------------- attach's uses
WORKER_ANSWER_BYTES = 64 << 20


_INSTANCES = None  # fr_backends.Memo: each rank's instances, by (pid, socket path), found once per attach


def worker_record(rp, timeout: float = 5.0) -> dict | None:
    """The rank's flight recorder through run-trainer's worker server (torch's `fr_trace_json` handler, and
    each other instance its torch keeps: ProcessGroupNCCL's, 2.15's per backend; fr_backends.py), asked with
    the job's rights; None when it does not answer or is not the rank's."""
    from ..evidence import fr_backends

    global _INSTANCES
    path = rp.worker_socket
    if not path:
        return None
    if _INSTANCES is None:
        _INSTANCES = fr_backends.Memo()

    def names():
        return _worker_answer(rp, path, "GET", "/handler/", timeout, list)

    instances = _INSTANCES.of((rp.pid, path), names)
    return fr_backends.gather(lambda h: _worker_answer(rp, path, "POST", f"/handler/{h}", timeout, dict), instances)


def _worker_answer(rp, path: str, method: str, url: str, timeout: float, kind: type):
    """The JSON answer (a ``kind``) of the rank's worker server to ``method url``; None when there is none."""
    import json

    request = (f"{method} {url} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
               "Connection: close\r\n\r\n").encode()

    def work() -> bytes:
        return ask_socket(rp, path, request, timeout, WORKER_ANSWER_BYTES)

    answer = as_job(rp, work, timeout, WORKER_ANSWER_BYTES + 64)
    if not answer:
        return None
    status, _, body = answer.partition(b"\n")
    if status != b"200":
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, kind) else None


def held_file_head(rp, path: str, cap: int, timeout: float = 5.0) -> bytes | None:
    """At most the first ``cap`` bytes of the regular file at ``path`` that the rank's process holds open and
    its user owns, read with the job's rights (job_paths.held_head); None when it is not that (noted)."""
    return as_job(rp, lambda: held_head(rp, path, cap), timeout, cap)


@dataclass
class _Unranked:
    """A process read before its rank is known (job_paths' RankLike): its notes name it by ``who``."""
    pid: int
    rank: int
    uid: int | None
    gid: int | None
    who: str


def ray_identity(pid: int, uid: int | None, gid: int | None):
    """A Ray Train worker's rank, world and run (launchers.ray.RayRank) from Ray's system log of it: a file its
    own process holds open (its /proc/PID/fd), read from its start with the job's rights; None when it holds no
    such log yet or its records do not give the rank of ``pid``."""
    who = _Unranked(pid, -1, uid, gid, f"Ray Train worker pid {pid}")
    for path in held_paths(pid, ray.is_rank_log):
        head = held_file_head(who, path, ray.HEAD_BYTES)
        got = ray.rank_of_log(head.decode("utf-8", "replace"), pid) if head else None
        if got is not None:
            return replace(got, session=ray.session_of(path))
    return None
