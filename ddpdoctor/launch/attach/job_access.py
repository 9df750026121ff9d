"""What a job names (its dump pipe, its dump file, its worker socket), touched only with that job's rights and
only when it is what it claims: the one place attach acts on a path a job's environment gave.

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
  nothing can be swapped in between; a FIFO or socket of someone else is never even opened.

Anything else is skipped with one note (``take_notes``) saying which rank named what and why; what is simply
not there (no dump yet, torch has not opened its pipe) is no note. Every child is bounded by a timeout and
killed past it; what it found comes back as bytes over a pipe, never as an object to run.
"""
from __future__ import annotations

import errno
import http.client
import os
import select
import signal
import socket
import stat
import struct
import threading
import time
from typing import Callable, Protocol

MAX_LINK_HOPS = 40
MAX_FDS = 65536  # a rank's descriptors looked at for the pipe it holds
MAX_NOTES = 50
WHY = "attach acts on what a job names only with the job's rights"


class Refused(Exception):
    """What the job named is not the job's, or not what it claims: skipped, with a note."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path} ({why})")  # the path, then why in brackets: never `name: value` to a redactor


class Absent(Exception):
    """Nothing is there (yet): skipped without a note."""


class RankLike(Protocol):
    pid: int
    rank: int
    uid: int | None
    gid: int | None


# ---------------------------------------------------------------- notes
_notes: list[tuple[int, str]] = []  # one attach run's (its threads'), taken by the document
_notes_lock = threading.Lock()


def note(rank: int, text: str) -> None:
    line = f"rank {rank}: {text}; not used ({WHY})"
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
    if rp.uid is None or rp.gid is None:
        note(rp.rank, "the user of its process is unknown")
        return None
    if os.geteuid() not in (0, rp.uid):
        note(rp.rank, f"attach runs as uid {os.geteuid()}, the job as uid {rp.uid}: only root or the job's "
                      "user may act for it")
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
        note(rp.rank, payload.decode("utf-8", "replace"))
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


# ---------------------------------------------------------------- inside the child: reaching a path
def walk(rp: RankLike, path: str) -> int:
    """An O_PATH descriptor of ``path``'s last component itself (never followed), reached component by
    component without a link (a folder's link only when root owns it); relative paths from the rank's own
    working folder. Absent when a component does not exist; Refused otherwise."""
    if not path or "\0" in path:
        raise Refused(repr(path), "not a path")
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    start = "/" if path.startswith("/") else f"/proc/{rp.pid}/cwd"
    try:
        cur = os.open(start, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused(path, f"its folder cannot be reached as the job's user: {exc.strerror}") from None
    todo = [p for p in path.split("/") if p not in ("", ".")]
    hops = 0
    try:
        while todo:
            name = todo.pop(0)
            try:
                fd = os.open(name, flags, dir_fd=cur)
            except FileNotFoundError:
                raise Absent() from None
            except OSError as exc:
                raise Refused(path, f"the job's user may not reach it: {exc.strerror}") from None
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                if not todo or st.st_uid != 0 or hops >= MAX_LINK_HOPS:
                    os.close(fd)
                    raise Refused(path, f"{'a link' if not todo else f'its folder {name!r} is a link'} of uid "
                                  f"{st.st_uid}, never followed")
                hops += 1
                target = os.readlink(name, dir_fd=cur)
                os.close(fd)
                if target.startswith("/"):
                    os.close(cur)
                    cur = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                todo = [p for p in target.split("/") if p not in ("", ".")] + todo
                continue
            if todo and not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise Absent()
            os.close(cur)
            cur = fd
        return cur
    except BaseException:
        os.close(cur)
        raise


def _owned(rp: RankLike, path: str, st: os.stat_result) -> None:
    if st.st_uid != rp.uid:
        raise Refused(path, f"owned by uid {st.st_uid}, not by the job's user, uid {rp.uid}")


def _kind(mode: int) -> str:
    from ...inputs import kind_of

    return "a link" if stat.S_ISLNK(mode) else "a regular file" if stat.S_ISREG(mode) else kind_of(mode)


def _reopen(fd: int, flags: int) -> int:
    """The very file ``fd`` (O_PATH) names, opened for use: no path is looked up again."""
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)


def _held_by(pid: int, fd: int) -> bool:
    """Whether process ``pid`` holds the file ``fd`` names open (one of its /proc/PID/fd entries is it)."""
    me = os.fstat(fd)
    mine = os.readlink(f"/proc/self/fd/{fd}")
    try:
        names = os.listdir(f"/proc/{pid}/fd")[:MAX_FDS]
    except OSError as exc:
        raise Refused(mine, f"the rank's open files cannot be read: {exc.strerror}") from None
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") != mine:
                continue  # the name first: no stat of an unrelated file (a hung mount)
            st = os.stat(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (me.st_dev, me.st_ino):
            return True
    return False


# ---------------------------------------------------------------- inside the child: what attach does there
def write_to_pipe(rp: RankLike, path: str, data: bytes) -> bool:
    """``data`` written, without blocking, into the FIFO at ``path``: only the rank's own, which its process
    holds open. False when nobody reads it (torch has not opened it); Refused when it is not the rank's pipe."""
    fd = walk(rp, path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISFIFO(st.st_mode):
            raise Refused(path, f"{_kind(st.st_mode)}, not a FIFO")
        _owned(rp, path, st)
        if not _held_by(rp.pid, fd):
            raise Refused(path, f"a FIFO rank {rp.rank}'s process, pid {rp.pid}, does not hold open")
        try:
            out = _reopen(fd, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return False  # no reader
            raise
        try:
            os.write(out, data)
        except BlockingIOError:
            pass  # full of earlier requests: one is pending anyway
        finally:
            os.close(out)
        return True
    finally:
        os.close(fd)


def regular_file(rp: RankLike, path: str, newer_than: float | None = None, cap: int = 0) -> tuple[float, bytes]:
    """(mtime, at most ``cap`` bytes) of the rank's own regular file at ``path``; Absent when it is not there
    or not newer than ``newer_than``; Refused when it is a link, not a regular file, someone else's, or larger
    than ``cap``."""
    fd = walk(rp, path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(path, f"{_kind(st.st_mode)}, not a regular file")
        _owned(rp, path, st)
        if newer_than is not None and st.st_mtime <= newer_than:
            raise Absent()
        if cap <= 0:
            return st.st_mtime, b""
        with os.fdopen(_reopen(fd, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb") as fh:
            if (os.fstat(fh.fileno()).st_dev, os.fstat(fh.fileno()).st_ino) != (st.st_dev, st.st_ino):
                raise Refused(path, "changed while it was opened")
            data = fh.read(cap + 1)
        if len(data) > cap:
            raise Refused(path, f"larger than {cap >> 10} KiB, the most read from it")
        return st.st_mtime, data
    finally:
        os.close(fd)


def ask_socket(rp: RankLike, path: str, request: bytes, timeout: float, cap: int) -> bytes:
    """The HTTP answer (status line, headers and body, at most ``cap`` bytes of body) of the rank's own unix
    socket at ``path`` to ``request``: a socket file of the rank's uid whose peer is the rank's process."""
    fd = walk(rp, path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISSOCK(st.st_mode):
            raise Refused(path, f"{_kind(st.st_mode)}, not a socket")
        _owned(rp, path, st)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.1, timeout))
            sock.connect(f"/proc/self/fd/{fd}")  # the checked socket file itself, not the path again
            pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
            if pid != rp.pid:
                raise Refused(path, f"served by pid {pid} of uid {uid}, not by rank {rp.rank}'s process, "
                              f"pid {rp.pid}")
            sock.sendall(request)
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            body = resp.read(cap + 1)
            if len(body) > cap:
                raise Refused(path, f"answered more than {cap >> 10} KiB")
            return str(resp.status).encode() + b"\n" + body
        finally:
            sock.close()
    finally:
        os.close(fd)


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


# ---------------------------------------------------------------- attach's uses
WORKER_ANSWER_BYTES = 64 << 20


def worker_record(rp, timeout: float = 5.0) -> dict | None:
    """The rank's flight recorder through run-trainer's worker server (torch's `fr_trace_json` handler),
    asked with the job's rights; None when it does not answer or is not the rank's."""
    import json

    path = rp.worker_socket
    if not path:
        return None
    request = b"POST /handler/fr_trace_json HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

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
    return data if isinstance(data, dict) else None
