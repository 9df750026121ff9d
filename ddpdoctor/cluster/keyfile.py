"""The run's own key: a random secret the master leaves in a file only the user can read, on a filesystem
the nodes share (``--shared-dir``, or the home directory), so a run is authenticated without a flag.

The file's name is the run's scope (a hash of the rendezvous endpoint, the rendezvous id and the node
count: public, it only says where to look); its content is ``secrets.token_hex(32)``, never derived from
anything public. The master creates it fresh for each run (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, in a
0700 directory it owns) and removes it when the run ends (also on SIGTERM and Ctrl-C). A node reads it
only when it is a regular file owned by this user, not a link, readable by no one else; the hello then
says whether it is this run's key (``envelope.key_id``), so a stale file from an earlier run is never used.
See PROTOCOL.md, "Authentication".
"""
from __future__ import annotations

import hashlib
import os
import secrets
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

HOME_DIR = Path("~/.ddpdoctor/keys")
SHARED_PREFIX = ".ddpdoctor-key-"
KEY_WAIT_S = 5.0  # how long a node looks for the file (a network filesystem can be slow to show a new file)
KEY_BYTES = 32


def scope(endpoint: str, rdzv_id: str | None, nnodes: int) -> str:
    """Where this run's key lives: the same on every node of the run, different for another endpoint or id."""
    return hashlib.sha256(f"{endpoint}|{rdzv_id or ''}|{nnodes}".encode()).hexdigest()[:32]


def candidates(run_scope: str, shared_dir: str | None, home: Path | None = None) -> list[Path]:
    """The files a run's key may be in, in order: the shared dir (when given), then the home directory."""
    out = []
    if shared_dir:
        out.append(Path(shared_dir) / f"{SHARED_PREFIX}{run_scope}")
    try:
        base = home if home is not None else HOME_DIR.expanduser()
    except RuntimeError:  # no home directory
        base = None
    if base is not None and str(base).startswith("/"):
        out.append(base / run_scope)
    return out


@dataclass
class KeyFiles:
    """The key the master made and where it wrote it (removed at the end of the run)."""

    key: str
    paths: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def remove(self) -> None:
        for path in self.paths:
            try:
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                    path.unlink()
            except OSError:
                pass
        self.paths = []


STALE_S = 24 * 3600  # a key file this old is from a master that was killed (SIGKILL cannot clean up)


def _sweep(directory: Path) -> None:
    """Remove this user's key files older than STALE_S from the home key directory."""
    try:
        entries = list(os.scandir(directory))[:10_000]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and now - st.st_mtime > STALE_S:
                os.unlink(entry.path)
        except OSError:
            pass


def _private_dir(path: Path) -> None:
    """The home key directory: created 0700; refused when it is a link or someone else's."""
    if not (path.name == "keys" and path.parent.name == ".ddpdoctor"):
        return  # a shared dir is the user's own choice: only the file is private there
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    for p in (path.parent, path):
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"{p} is not a directory owned by this user")
        if st.st_mode & 0o077:
            os.chmod(p, 0o700)
    _sweep(path)


def create(paths: list[Path]) -> KeyFiles:
    """The master: a fresh key written to every candidate it can write (a stale file of ours is replaced)."""
    made = KeyFiles(key=secrets.token_hex(KEY_BYTES))
    for path in paths:
        try:
            _private_dir(path.parent)
            try:
                st = os.lstat(path)
                if st.st_uid != os.getuid():
                    raise OSError(f"{path} exists and belongs to someone else")
                path.unlink()  # ours, from an earlier run: O_EXCL below needs it gone
            except FileNotFoundError:
                pass
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                # no fsync: the key lives for one run, and close() is what shows it to the other nodes (NFS's
                # close-to-open); an fsync on the master's way to its hello cost 4-57 ms on a busy disk
                os.write(fd, made.key.encode())
            finally:
                os.close(fd)
            made.paths.append(path)
        except OSError as exc:
            made.errors.append(f"{path}: {exc.strerror or exc}")
    return made


def read(path: Path) -> str | None:
    """A key file's content when it is safe to use: a regular file of this user, no link, mode 0600 or
    stricter, of the right size. None otherwise (absent, someone else's, readable by others)."""
    try:
        try:
            os.listdir(path.parent)  # on NFS, listing the directory revalidates a cached "no such file"
        except OSError:
            pass
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077 \
                or st.st_size != 2 * KEY_BYTES:
            return None
        text = os.read(fd, 2 * KEY_BYTES + 1).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    return text if len(text) == 2 * KEY_BYTES and all(c in "0123456789abcdef" for c in text) else None


def unusable(path: Path) -> str:
    """Why ``read`` takes no key from ``path``, in a user's words (for a node refused for having none)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "no such file (this node does not share the master's home directory or --shared-dir)"
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror or exc}: a folder on the way is not this user's to read)"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link (refused: a key file is never followed through a link)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, and this node runs as uid {os.getuid()} (run every node as the same user)"
    if st.st_mode & 0o077:
        return f"readable by others (mode {stat.S_IMODE(st.st_mode):04o}; a key file is 0600)"
    if read(path) is None:
        return "not a key of this tool (its size or content), or unreadable"
    return "a key of another run (an earlier master's, left behind)"


def may_appear(paths: list[Path]) -> bool:
    """Whether waiting for a key file can help: one of the places is absent (a network filesystem can show a
    new file late), not unusable for good (a folder this user may not enter, someone else's file)."""
    for path in paths:
        try:
            os.lstat(path)
        except FileNotFoundError:
            return True
        except OSError:
            continue
    return False


def find(paths: list[Path], matches, until: float) -> tuple[str | None, Path | None]:
    """A node: the first key in ``paths`` that ``matches`` (is this run's), polling until ``until``."""
    while True:
        for path in paths:
            key = read(path)
            if key is not None and matches(key):
                return key, path
        if time.monotonic() >= until:
            return None, None
        time.sleep(0.25)
