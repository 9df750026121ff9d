"""What a process running as root trusts on disk: a file or directory only root (or the caller) owns and no other
uid can write, as sudo (sudoers) and sshd's StrictModes decide; directories opened once and used through their
descriptor (``dir_fd``, O_NOFOLLOW), so a link planted after the check is never followed.

Not running as root, the user's own files are the user's business: ``guard_*`` only check as root.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import UsageError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def as_root() -> bool:
    return os.geteuid() == 0


def trusted_uids() -> set[int]:
    return {0, os.geteuid()}


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def why_untrusted(st: os.stat_result, *, sticky_ok: bool = False) -> str | None:
    """Why another uid could change what ``st`` describes, or None: its owner, or its write bits (a group other
    than root's, others; ``sticky_ok``: a sticky directory such as /tmp, whose entries only their owners replace)."""
    if st.st_uid not in trusted_uids():
        return f"owned by {_who(st.st_uid)}"
    others = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)
    if others and not (sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        return f"writable by {'others' if st.st_mode & stat.S_IWOTH else 'group ' + str(st.st_gid)} " \
               f"(mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def file_refusal(path: str | os.PathLike) -> str | None:
    """Why root must not trust the file at ``path`` (a config, a program it names), or None: the file (through a
    link: the link's owner and the file's), its directory as named and as resolved."""
    p = Path(path)
    try:
        lst = os.lstat(p)
        if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in trusted_uids():
            return f"a link owned by {_who(lst.st_uid)}"
        st = os.stat(p)
        real = Path(os.path.realpath(p))
        for folder in dict.fromkeys((p.absolute().parent, real.parent)):
            why = why_untrusted(os.stat(folder), sticky_ok=True)
            if why:
                return f"in {folder}, {why}"
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    return why_untrusted(st)


def guard_file(path: str | os.PathLike, what: str) -> None:
    """As root, refuse (UsageError, one line) a file another uid owns or can write."""
    if not as_root():
        return
    why = file_refusal(path)
    if why:
        raise UsageError(f"{what} {path}: {why}; running as root, ddpdoctor trusts only what root owns and no "
                         f"other user can write (chown root: and chmod go-w it)")


def open_dir(path: str | os.PathLike, what: str, *, follow: bool = True) -> int:
    """A descriptor of the directory ``path`` (the caller closes it; ``follow=False``: not through a link). As root
    it must be owned by root (or the caller) and writable by no one else: files are then created, read and removed
    through it (``dir_fd``) with no link followed. Raises OSError when it cannot be opened, UsageError when root
    must not use it."""
    fd = os.open(path, os.O_RDONLY | DIRECTORY | CLOEXEC | (0 if follow else NOFOLLOW))
    if as_root():
        why = why_untrusted(os.fstat(fd))
        if why:
            os.close(fd)
            raise UsageError(f"{what} {path}: {why}; running as root, ddpdoctor writes only where no other user "
                             "can (chown root: and chmod go-w it)")
    return fd


def guard_dir(path: str | os.PathLike, what: str) -> None:
    """As root, refuse a directory another uid owns or can write (an absent one: its nearest existing parent)."""
    if not as_root():
        return
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        os.close(open_dir(p, what))
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot be opened ({exc.strerror or exc})") from None


def open_nofollow(name: str, flags: int, dir_fd: int, mode: int = 0o600) -> int:
    """``name`` in the directory ``dir_fd``, never through a link (ELOOP) and never blocking on a FIFO."""
    return os.open(name, flags | NOFOLLOW | CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dir_fd)


def read_regular_at(dir_fd: int, name: str, cap: int) -> bytes | None:
    """At most ``cap`` + 1 bytes of the regular file ``name`` in ``dir_fd`` (no link, no FIFO, no device), or None
    when there is none such."""
    try:
        fd = open_nofollow(name, os.O_RDONLY, dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
