"""A directory other programs read (node_exporter's textfile directory) written safely: opened once, every file in
it created, read and renamed through its descriptor with no link followed and no FIFO waited on, under a lock file
only this uid can open (0600), waited for a bounded time.

Why the lock is recreated when it is not 0600 and ours: flock needs only a read-only descriptor, so any user who
can open a 0644 lock file can hold it for ever and hang every root run that writes metrics (a health check, a
prolog); a descriptor already open on the old file keeps nothing once the name is a new file.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from contextlib import contextmanager
from typing import Iterator

from .. import trust

LOCK_WAIT_S = 5.0  # a writer holds the lock for the few ms of a read and a rename
MAX_MERGE_BYTES = 4 << 20  # an existing file larger than this is replaced, not parsed and merged


class Folder:
    """``with Folder(DIR) as f``: DIR's descriptor (as root: DIR owned by root and writable by no one else, reached
    without following a link another uid owns: Debian's /var/lib/prometheus is the service user's, which could put a
    link to /etc/ddpdoctor in place of node-exporter/; trust.walk)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.fd = -1

    def __enter__(self) -> "Folder":
        self.fd = trust.open_dir(self.path, "--prometheus-textfile")
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)

    @contextmanager
    def locked(self, name: str, wait_s: float | None = None) -> Iterator[None]:
        """The lock file ``name`` held exclusively; TimeoutError after ``wait_s`` (LOCK_WAIT_S)."""
        import fcntl

        wait_s = LOCK_WAIT_S if wait_s is None else wait_s
        fd = self._own_lock(name)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(errno.ETIMEDOUT, f"{name} held by another process for {wait_s:g} s, "
                                                            "metrics not merged") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def _own_lock(self, name: str) -> int:
        """The lock file, ours and 0600; any other (another uid's, readable by others, a link, a FIFO) replaced."""
        for _ in range(3):
            try:
                fd = trust.open_nofollow(name, os.O_RDWR | os.O_CREAT, self.fd, 0o600)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EACCES, errno.EPERM):
                    raise
                fd = -1
            if fd >= 0:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
                    return fd
                os.close(fd)
            self._remove(name)
        raise OSError(errno.EEXIST, f"cannot make a private lock file {name}")

    def _remove(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except IsADirectoryError:
            os.rmdir(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def read(self, name: str, cap: int = MAX_MERGE_BYTES) -> bytes | None:
        """The regular file ``name`` (no link, no FIFO), or None when absent, not one, or over ``cap`` bytes."""
        raw = trust.read_regular_at(self.fd, name, cap)
        return None if raw is None or len(raw) > cap else raw

    def replace(self, name: str, data: bytes) -> None:
        """``name`` made ``data`` atomically: a 0644 temp file (node_exporter reads it as its own user), renamed
        over the name (a link there is replaced, not followed)."""
        tmp = f".{name}.{os.getpid()}.tmp"
        self._remove(tmp)
        fd = trust.open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.fd, 0o644)
        try:
            os.fchmod(fd, 0o644)  # whatever the umask (0077 under some sites' root shells)
            with os.fdopen(fd, "wb", closefd=True) as fh:
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self._remove(tmp)
            raise
