"""What a process running as root trusts on disk: a file or directory only root (or the caller) owns and no other
uid can write, by its mode bits or by a POSIX ACL entry, as sudo (sudoers) and sshd's StrictModes decide; paths
walked one component at a time from ``/`` through descriptors, following only links root owns, and what is found
used through its descriptor (``dir_fd``, O_NOFOLLOW), so a link planted after the check is never followed.

Not running as root, the user's own files are the user's business: ``guard_*`` only check as root.
"""
from __future__ import annotations

import errno
import os
import stat
import struct
from pathlib import Path

from .errors import UsageError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
ACL_XATTR = "system.posix_acl_access"  # the kernel's include/uapi/linux/posix_acl_xattr.h
ACL_VERSION = 2
ACL_USER, ACL_GROUP, ACL_MASK = 0x02, 0x08, 0x10  # named user, named group, the mask of both (and of the group)
ACL_WRITE = 0x02
MAX_LINKS = 40  # links followed in one path, as the kernel's MAXSYMLINKS
DIR_MODE = 0o755  # a folder root creates: whatever the umask (umask 000 made /var/lib/ddpdoctor 0777)


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


def _group(gid: int) -> str:
    try:
        import grp

        return f"group {grp.getgrgid(gid).gr_name} (gid {gid})"
    except (KeyError, ImportError):
        return f"group {gid}"


def acl_writers(raw: bytes) -> list[str]:
    """Who other than root (or the caller) the access ACL ``raw`` (the ``system.posix_acl_access`` xattr: a
    little-endian u32 version, then u16 tag, u16 perm, u32 id per entry) lets write: each named user and named
    group whose entry, under the mask, has the write bit. The owning group and others are the mode bits' (with an
    ACL the group bits are the mask). A value that is not such an ACL: ["an unreadable ACL"]."""
    if len(raw) < 4 or (len(raw) - 4) % 8 or struct.unpack_from("<I", raw)[0] != ACL_VERSION:
        return ["an ACL ddpdoctor cannot read"]
    entries = list(struct.iter_unpack("<HHI", raw[4:]))
    mask = next((perm for tag, perm, _ in entries if tag == ACL_MASK), 0o7)
    out = []
    for tag, perm, ident in entries:
        if not perm & mask & ACL_WRITE:
            continue
        if tag == ACL_USER and ident not in trusted_uids():
            out.append(f"user {_who(ident)}")
        elif tag == ACL_GROUP and ident != 0:
            out.append(_group(ident))
    return out


def acl_refusal(target: int | str | os.PathLike) -> str | None:
    """Why the ACL of ``target`` (a descriptor, or a path whose link is not followed) lets another uid write, or
    None (no ACL, or a file system without them)."""
    try:
        if isinstance(target, int):
            raw = os.getxattr(target, ACL_XATTR)
        else:
            raw = os.getxattr(target, ACL_XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            return None
        return f"its ACL cannot be read ({exc.strerror or exc})"
    writers = acl_writers(raw)
    return f"writable by {', '.join(writers)} through its ACL (getfacl shows it)" if writers else None


def why_untrusted(st: os.stat_result, *, sticky_ok: bool = False, acl_of: int | str | None = None) -> str | None:
    """Why another uid could change what ``st`` describes, or None: its owner, or its write bits (a group other
    than root's, others; ``sticky_ok``: a sticky directory such as /tmp, whose entries only their owners replace),
    or (``acl_of``: its descriptor or path) an ACL entry granting another user or group write."""
    if st.st_uid not in trusted_uids():
        return f"owned by {_who(st.st_uid)}"
    sticky = sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    others = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)
    if others and not sticky:
        return f"writable by {'others' if st.st_mode & stat.S_IWOTH else 'group ' + str(st.st_gid)} " \
               f"(mode {stat.S_IMODE(st.st_mode):04o})"
    if acl_of is not None and not sticky:
        return acl_refusal(acl_of)
    return None


class Refused(Exception):
    """Why root must not use a path (a link or a folder on the way, the thing itself): one clause."""


def _dir_flags() -> int:
    # root reads any folder; a user may only search some on the way (a 0711 home): O_PATH needs no read right
    return (os.O_RDONLY if as_root() else getattr(os, "O_PATH", os.O_RDONLY)) | DIRECTORY | NOFOLLOW | CLOEXEC


def walk(path: str | os.PathLike, *, strict: bool = False, create: bool = False,
         follow_last: bool = True) -> tuple[int, str]:
    """(a descriptor of the folder that holds ``path``'s last component, that component's name): the path walked
    from ``/`` one component at a time through descriptors, so what is checked is what is used. As root a link is
    followed only when root (or the caller) owns it, wherever it points (a service user's folder on the way could
    otherwise hold a link to /etc); ``strict``: every folder on the way, the links' targets' too, must be root's
    alone (sshd's StrictModes; a sticky /tmp passes); ``create``: a missing folder on the way is made DIR_MODE
    whatever the umask; ``follow_last``: the last component is not followed when it is a link. The caller closes
    the descriptor. Raises Refused, or OSError (a missing folder, ELOOP past MAX_LINKS)."""
    todo = [n for n in os.fspath(Path(path).absolute()).split("/") if n][::-1]
    fds, names, links = [os.open("/", _dir_flags() & ~NOFOLLOW)], [], 0
    try:
        _check_folder(fds[0], "/", strict)
        while todo:
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if len(fds) > 1:
                    os.close(fds.pop())
                    names.pop()
                continue
            here = "/" + "/".join(names)
            try:
                st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                if not todo:
                    return fds.pop(), name  # the last may be absent: the caller opens or creates it
                if not create:
                    raise
                _mkdir_at(fds[-1], name)
                st = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) and (todo or follow_last):
                if as_root() and st.st_uid not in trusted_uids():
                    raise Refused(f"{os.path.join(here, name)} is a link owned by {_who(st.st_uid)}")
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many links", os.fspath(path))
                target = os.readlink(name, dir_fd=fds[-1])
                if target.startswith("/"):
                    while len(fds) > 1:
                        os.close(fds.pop())
                    names.clear()
                todo.extend(n for n in reversed(target.split("/")) if n)
                continue
            if not todo:
                return fds.pop(), name
            fds.append(os.open(name, _dir_flags(), dir_fd=fds[-1]))
            names.append(name)
            _check_folder(fds[-1], "/" + "/".join(names), strict)
        return fds.pop(), "."
    finally:
        for fd in fds:
            os.close(fd)


def _check_folder(fd: int, shown: str, strict: bool) -> None:
    if strict and as_root():
        why = why_untrusted(os.fstat(fd), sticky_ok=True, acl_of=fd)
        if why:
            raise Refused(f"in {shown}, {why}")


def _mkdir_at(dir_fd: int, name: str) -> None:
    """``name`` made a folder DIR_MODE (the umask does not widen or narrow it); one made meanwhile is used."""
    try:
        os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
    except FileExistsError:
        return
    fd = os.open(name, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC, dir_fd=dir_fd)
    try:
        os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)


def _open_file(path: str | os.PathLike, flags: int = os.O_RDONLY) -> int:
    """A descriptor of the file at ``path`` found by a strict walk (as root: Refused when it, a link to it or a
    folder on the way is another user's to change)."""
    parent, name = walk(path, strict=True)
    try:
        fd = open_nofollow(name, flags, parent)
    finally:
        os.close(parent)
    if as_root():
        st = os.fstat(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else why_untrusted(st, acl_of=fd)
        if why:
            os.close(fd)
            raise Refused(why)
    return fd


def file_refusal(path: str | os.PathLike) -> str | None:
    """Why root must not trust the file at ``path`` (a config, a program it names), or None: the file (its mode
    and ACL), each link to it, every folder on the way from / (sshd's StrictModes)."""
    try:
        os.close(_open_file(path))
    except Refused as why:
        return str(why)
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    return None


def program(name: str) -> tuple[str | None, str | None]:
    """A program found on PATH that this process may run: (its path, None); (None, why) when it is not here or,
    as root, another user could change it (the file or a folder on its way)."""
    import shutil

    path = shutil.which(name)
    if path is None:
        return None, f"no `{name}` on this node"
    why = file_refusal(path) if as_root() else None
    return (None, f"{path} refused: {why}") if why else (path, None)


def _refusal(what: str, path: str | os.PathLike, why: object) -> UsageError:
    return UsageError(f"{what} {path}: {why}; running as root, ddpdoctor trusts only what root owns and no "
                      f"other user can write (chown root: and chmod go-w it)")


def guard_file(path: str | os.PathLike, what: str) -> None:
    """As root, refuse (UsageError, one line) a file another uid owns or can write."""
    if not as_root():
        return
    why = file_refusal(path)
    if why:
        raise _refusal(what, path, why)


def read_file(path: str | os.PathLike, what: str, cap: int) -> bytes:
    """At most ``cap`` + 1 bytes of the file at ``path``, read from the one descriptor that was checked (a path
    checked then opened again was another file in 69 of 3,000 loads when a user could swap a folder on the way).
    As root it must pass ``file_refusal`` (UsageError); OSError when it cannot be read."""
    try:
        fd = _open_file(path)
    except Refused as why:
        raise _refusal(what, path, why) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return _read_capped(fd, cap)
    finally:
        os.close(fd)


def open_dir(path: str | os.PathLike, what: str, *, follow: bool = True, create: bool = False) -> int:
    """A descriptor of the directory ``path`` (the caller closes it; ``follow=False``: not through a link;
    ``create``: it and the folders on the way made DIR_MODE when missing), found by ``walk``. As root it must be
    owned by root (or the caller) and writable by no one else, by mode or ACL: files are then created, read and
    removed through it (``dir_fd``) with no link followed. Raises OSError when it cannot be opened, UsageError
    when root must not use it."""
    try:
        parent, name = walk(path, create=create, follow_last=follow)
    except Refused as why:
        raise _dir_refusal(what, path, why) from None
    try:
        if create:
            _mkdir_at(parent, name)
        fd = os.open(name, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)
    return _checked_dir(fd, what, path)


def open_subdir(dir_fd: int, name: str, what: str, shown: str | os.PathLike, *, create: bool = False) -> int:
    """The folder ``name`` in ``dir_fd`` (``shown``: its path, for messages; made DIR_MODE when missing and
    ``create``), never through a link (OSError: ELOOP, ENOTDIR); as root root's alone like ``open_dir`` (a node
    folder chowned to a user could hold a link to root's files)."""
    if create:
        _mkdir_at(dir_fd, name)
    fd = os.open(name, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC, dir_fd=dir_fd)
    return _checked_dir(fd, what, shown)


def open_dirs(top: str | os.PathLike, names: list[str], what: str, *, create: bool = False) -> int:
    """``top`` opened once (``open_dir``), then each of ``names`` below it by descriptor, never through a link,
    each root's alone as root: the descriptor of the last (the caller closes it). UsageError when root must not
    use one; OSError when one is missing or a link."""
    fd = open_dir(top, what, create=create)
    shown = Path(top)
    try:
        for name in names:
            shown = shown / name
            inner = open_subdir(fd, name, what, shown, create=create)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _checked_dir(fd: int, what: str, path: str | os.PathLike) -> int:
    if as_root():
        why = why_untrusted(os.fstat(fd), acl_of=fd)
        if why:
            os.close(fd)
            raise _dir_refusal(what, path, why)
    return fd


def _dir_refusal(what: str, path: str | os.PathLike, why: object) -> UsageError:
    return UsageError(f"{what} {path}: {why}; running as root, ddpdoctor writes only where no other user can "
                      "(chown root: and chmod go-w it)")


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


def write_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """``name`` in ``dir_fd`` made ``data`` atomically (a temp file, fchmod ``mode`` whatever the umask, renamed
    over the name: a link there is replaced, never followed). OSError after removing the temp file."""
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd, mode)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb", closefd=True) as fh:
            fh.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


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
        return _read_capped(fd, cap)
    finally:
        os.close(fd)


def _read_capped(fd: int, cap: int) -> bytes:
    chunks, left = [], cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
