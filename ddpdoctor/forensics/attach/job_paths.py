"""Inside job_access's child (already with the job's uid and gid): reaching a path a job named without a link,
and using it only when it is the rank's own and what it claims: a FIFO its process holds open, a regular file,
a socket its process serves. Each check is made on the descriptor that is then used (O_PATH, fstat, reopened
through /proc/self/fd), so nothing can be swapped in between; a FIFO or socket of someone else is never opened.
Refused: not the job's, or not what it claims (job_access notes it); Absent: nothing there (no note)."""
from __future__ import annotations

import errno
import http.client
import os
import socket
import stat
import struct
from typing import Protocol

# imported here, never inside the forked child: another thread of attach may hold an import lock at the fork
from ...inputs import kind_of

MAX_LINK_HOPS = 40
MAX_FDS = 65536  # a rank's descriptors looked at for the pipe it holds


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
        st = _own_regular(rp, path, fd)
        if newer_than is not None and st.st_mtime <= newer_than:
            raise Absent()
        if cap <= 0:
            return st.st_mtime, b""
        data = _read_same(fd, path, st, cap + 1)
        if len(data) > cap:
            raise Refused(path, f"larger than {cap >> 10} KiB, the most read from it")
        return st.st_mtime, data
    finally:
        os.close(fd)


def held_head(rp: RankLike, path: str, cap: int) -> bytes:
    """At most the first ``cap`` bytes of the regular file at ``path``: the rank's user's, and one its process
    holds open (a launcher's record of that very process: Ray Train's worker log). A file that grows is read
    from its start, never refused for its size."""
    fd = walk(rp, path)
    try:
        st = _own_regular(rp, path, fd)
        if not _held_by(rp.pid, fd):
            raise Refused(path, f"a file the process, pid {rp.pid}, does not hold open")
        return _read_same(fd, path, st, cap)
    finally:
        os.close(fd)


def _own_regular(rp: RankLike, path: str, fd: int) -> os.stat_result:
    """The stat of the file ``fd`` (opened without following links) names: a regular file of the rank's user."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(path, f"{_kind(st.st_mode)}, not a regular file")
    _owned(rp, path, st)
    return st


def _read_same(fd: int, path: str, st: os.stat_result, n: int) -> bytes:
    """At most ``n`` bytes of that same file, reopened for reading; Refused when it changed meanwhile."""
    with os.fdopen(_reopen(fd, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb") as fh:
        if (os.fstat(fh.fileno()).st_dev, os.fstat(fh.fileno()).st_ino) != (st.st_dev, st.st_ino):
            raise Refused(path, "changed while it was opened")
        return fh.read(n)


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
