"""job_access and job_paths: what a job names is used in a child with the job's rights, and only when it is the
rank's own and what it claims (a FIFO it holds, a regular file, a socket it serves), reached without a link. Here
the "rank" is this test process (or a process it starts); ids are changed with chown as root (skipped otherwise)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpdoctor.forensics.attach import job_access as ja
from ddpdoctor.forensics.attach import job_paths as jp

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to change owners and drop to another user")


def me(**kw) -> SimpleNamespace:
    return SimpleNamespace(pid=os.getpid(), rank=3, uid=os.geteuid(), gid=os.getegid(), **kw)


def run(rp, work, timeout=10.0):
    ja.take_notes()
    got = ja.as_job(rp, work, timeout)
    return got, ja.take_notes()


@pytest.fixture
def folder():
    """A folder another user may reach (pytest's tmp_path lies in a 0700 one)."""
    made = Path(tempfile.mkdtemp(prefix="ddpdoctor-job-access-"))
    os.chmod(made, 0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_a_regular_file_of_the_rank_is_read_and_a_link_never_followed(folder):
    f = folder / "dump_3"
    f.write_bytes(b"record")
    (folder / "link_3").symlink_to(f)
    rp = me()
    assert run(rp, lambda: jp.regular_file(rp, str(f), cap=100)[1]) == (b"record", [])
    got, notes = run(rp, lambda: jp.regular_file(rp, str(folder / "link_3"), cap=100)[1])
    assert got is None and notes == [f"rank 3: {folder}/link_3 (a link of uid {os.geteuid()}, never followed); "
                                     f"not used ({ja.WHY})"]
    assert run(rp, lambda: jp.regular_file(rp, str(folder / "absent"), cap=100)[1]) == (None, [])  # no note
    got, notes = run(rp, lambda: jp.regular_file(rp, str(f), cap=3)[1])
    assert got is None and "larger than" in notes[0]
    stamp = os.stat(f).st_mtime
    assert run(rp, lambda: jp.regular_file(rp, str(f), newer_than=stamp, cap=100)[1]) == (None, [])
    os.mkfifo(folder / "fifo_3")
    got, notes = run(rp, lambda: jp.regular_file(rp, str(folder / "fifo_3"), cap=100)[1])
    assert got is None and "a FIFO, not a regular file" in notes[0]


def test_a_relative_path_is_the_ranks_own_folders(folder, monkeypatch):
    (folder / "dump_3").write_bytes(b"mine")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=folder)
    try:
        rp = SimpleNamespace(pid=child.pid, rank=3, uid=os.geteuid(), gid=os.getegid())
        monkeypatch.chdir("/")
        assert run(rp, lambda: jp.regular_file(rp, "dump_3", cap=100)[1]) == (b"mine", [])
    finally:
        child.kill()
        child.wait(10)


@as_root
def test_another_users_file_and_a_link_in_its_folders_are_refused(folder):
    theirs = folder / "theirs_3"
    theirs.write_bytes(b"root's")
    rp = me()
    rp.uid, rp.gid = NOBODY, NOBODY
    got, notes = run(rp, lambda: jp.regular_file(rp, str(theirs), cap=100)[1])
    assert got is None and f"owned by uid 0, not by the job's user, uid {NOBODY}" in notes[0]
    sub = folder / "real"
    sub.mkdir()
    (sub / "d").write_bytes(b"x")
    os.chown(sub / "d", NOBODY, NOBODY)
    (folder / "jump").symlink_to(sub)
    os.lchown(folder / "jump", NOBODY, NOBODY)  # a link the job made: never followed
    got, notes = run(rp, lambda: jp.regular_file(rp, str(folder / "jump" / "d"), cap=100)[1])
    assert got is None and "its folder 'jump' is a link of uid 65534" in notes[0]
    os.lchown(folder / "jump", 0, 0)  # root's own layout (/var/run -> /run): followed
    assert run(rp, lambda: jp.regular_file(rp, str(folder / "jump" / "d"), cap=100)[1]) == (b"x", [])


@as_root
def test_the_child_has_the_jobs_ids_and_no_groups(folder):
    rp = me()
    rp.uid, rp.gid = NOBODY, NOBODY
    got, _ = run(rp, lambda: f"{os.getuid()} {os.geteuid()} {os.getgid()} {os.getgroups()}".encode())
    assert got == f"{NOBODY} {NOBODY} {NOBODY} []".encode()
    secret = folder / "root_only"
    secret.write_bytes(b"x")
    os.chmod(secret, 0o600)
    got, _ = run(rp, lambda: open(secret, "rb").read())  # what the kernel refuses the job, it refuses here
    assert got is None


def test_another_user_than_root_or_the_jobs_own_does_nothing():
    if os.geteuid() == 0:
        pytest.skip("root may act for any user")
    rp = me()
    rp.uid = os.geteuid() + 1
    got, notes = run(rp, lambda: b"ran")
    assert got is None and "only root or the job's user" in notes[0]


def test_a_child_past_its_time_is_killed_and_reaped():
    import psutil

    rp = me()
    before = {p.pid for p in psutil.Process().children()}  # an xdist worker may hold other tests' children
    start = time.monotonic()
    got, _ = run(rp, lambda: time.sleep(60) or b"late", timeout=0.5)
    assert got is None and time.monotonic() - start < 20
    left = [p for p in psutil.Process().children() if p.pid not in before]
    assert left == []  # no child left behind, not even a zombie (a zombie is still listed as a child)


def test_only_a_fifo_the_rank_holds_open_is_written(folder):
    rp = me()
    held, loose = folder / "held_3.pipe", folder / "loose_3.pipe"
    os.mkfifo(held)
    os.mkfifo(loose)
    reader = os.open(held, os.O_RDONLY | os.O_NONBLOCK)
    other = subprocess.Popen([sys.executable, "-c", f"import os, time; fd = os.open({str(loose)!r}, os.O_RDONLY | "
                              "os.O_NONBLOCK); print(flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        other.stdout.readline()  # the other process holds ``loose`` open: a reader, but not the rank
        assert run(rp, lambda: b"y" if jp.write_to_pipe(rp, str(held), b"1") else b"n") == (b"y", [])
        assert os.read(reader, 8) == b"1"
        got, notes = run(rp, lambda: b"y" if jp.write_to_pipe(rp, str(loose), b"1") else b"n")
        assert got is None and "a FIFO rank 3's process" in notes[0] and "does not hold open" in notes[0]
        (folder / "plain_3.pipe").write_text("keep")
        got, notes = run(rp, lambda: b"y" if jp.write_to_pipe(rp, str(folder / "plain_3.pipe"), b"1") else b"n")
        assert got is None and "a regular file, not a FIFO" in notes[0]
        assert (folder / "plain_3.pipe").read_text() == "keep"
    finally:
        os.close(reader)
        other.kill()
        other.wait(10)


def test_a_file_the_rank_holds_open_is_read_from_its_start_and_only_that(folder):
    """A launcher's record of the rank (Ray Train's worker log): the file its own process holds open, read from its
    start however long it grew; a file it does not hold, a link and a folder are refused."""
    rp = me(who="Ray Train worker pid 1")
    held, loose = folder / "held.log", folder / "loose.log"
    held.write_bytes(b"first record\n" + b"x" * 4096)
    loose.write_bytes(b"someone else's")
    (folder / "link.log").symlink_to(held)
    with open(held, "ab") as writer:  # held open for writing, as a logging.FileHandler holds its file
        assert ja.held_paths(os.getpid(), lambda p: p.startswith(str(folder))) == [str(held)]
        assert run(rp, lambda: jp.held_head(rp, str(held), 12)) == (b"first record", [])
        got, notes = run(rp, lambda: jp.held_head(rp, str(loose), 12))
        assert got is None and notes == [f"Ray Train worker pid 1: {loose} (a file the process, pid {os.getpid()}, "
                                         f"does not hold open); not used ({ja.WHY})"]
        got, notes = run(rp, lambda: jp.held_head(rp, str(folder / "link.log"), 12))
        assert got is None and "never followed" in notes[0]
        got, notes = run(rp, lambda: jp.held_head(rp, str(folder), 12))
        assert got is None and "not a regular file" in notes[0]
        ja.take_notes()
        assert ja.held_file_head(rp, str(held), 5) == b"first" and ja.take_notes() == []
        assert not writer.closed


@as_root
def test_a_held_file_is_read_as_the_jobs_user_and_roots_file_a_worker_holds_is_refused(folder):
    """A worker of nobody's that holds root's file open (a descriptor passed to it) gets no read of it through
    attach; its own file is read, in a child with nobody's ids."""
    own, roots = folder / "own.log", folder / "roots.log"
    own.write_bytes(b"nobody's record")
    os.chown(own, NOBODY, NOBODY)
    roots.write_bytes(b"root's secret")
    os.chmod(roots, 0o600)
    fds = [os.open(own, os.O_RDONLY), os.open(roots, os.O_RDONLY)]
    worker = subprocess.Popen(["sleep", "30"], user=NOBODY, group=NOBODY, pass_fds=fds)  # holds both from exec on
    try:
        rp = SimpleNamespace(pid=worker.pid, rank=-1, uid=NOBODY, gid=NOBODY, who=f"Ray Train worker pid {worker.pid}")
        assert sorted(ja.held_paths(worker.pid, lambda p: p.startswith(str(folder)))) == [str(own), str(roots)]
        assert run(rp, lambda: jp.held_head(rp, str(own), 64)) == (b"nobody's record", [])
        got, notes = run(rp, lambda: jp.held_head(rp, str(roots), 64))
        assert got is None and "owned by uid 0" in notes[0] and notes[0].startswith("Ray Train worker pid")
    finally:
        for fd in fds:
            os.close(fd)
        worker.kill()
        worker.wait(10)


@as_root
def test_a_fifo_of_another_user_is_never_opened(folder):
    rp = me()
    rp.uid, rp.gid = NOBODY, NOBODY
    fifo = folder / "root_3.pipe"
    os.mkfifo(fifo, 0o666)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        got, notes = run(rp, lambda: b"y" if jp.write_to_pipe(rp, str(fifo), b"1") else b"n")
        assert got is None and "owned by uid 0" in notes[0]
        assert os.read(reader, 8) == b""  # no byte came
    finally:
        os.close(reader)


SERVER = r'''
import socket, sys
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(4)
print(flush=True)
while True:
    c, _ = srv.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
    c.close()
'''


def test_a_socket_is_asked_only_when_its_peer_is_the_rank(folder):
    path = str(folder / "w_3.sock")
    server = subprocess.Popen([sys.executable, "-c", SERVER, path], stdout=subprocess.PIPE)
    try:
        server.stdout.readline()
        request = b"POST /handler/x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        owner = SimpleNamespace(pid=server.pid, rank=3, uid=os.geteuid(), gid=os.getegid())
        assert run(owner, lambda: jp.ask_socket(owner, path, request, 5, 100)) == (b"200\n{}", [])
        rp = me()  # this process names the socket, another one serves it
        got, notes = run(rp, lambda: jp.ask_socket(rp, path, request, 5, 100))
        assert got is None and f"served by pid {server.pid}" in notes[0]
    finally:
        server.kill()
        server.wait(10)
