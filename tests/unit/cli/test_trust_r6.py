"""Round 6 of the hostile local user (issue 47), part one: what a user can do to the root runs that write metrics and
read a site config: hold the textfile lock, plant links and FIFOs, own the config or the program it names. Run as
root with the real `nobody` (tests/as_nobody.py); each test fails on the code before the round."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.errors import UsageError
from ddpdoctor.report import prometheus, textfile
from ddpdoctor.unattended import site
from tests.as_nobody import NOBODY, why_not
from tests.unit.helpers import run_cli

NOBODY_UID = 65534
PRE = {"kind": "preflight", "verdict": "pass", "created": "2026-11-28T10:00:00+00:00", "nodes": {"h": {}},
       "results": [{"check": "resources", "level": "pass", "summary": "ok", "nodes": ["h"]}]}
HOLD_LOCK = ("import fcntl, sys, time\nf = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_SH)\n"
             "print('held', flush=True)\ntime.sleep(120)\n")


def _need_nobody():
    why = why_not()
    if why:
        pytest.skip(why)


@pytest.fixture
def shared_dir():
    """A root-owned 0755 directory nobody can reach (pytest's tmp_path is 0700), as node_exporter's is."""
    folder = Path(tempfile.mkdtemp(prefix="ddpd-r6-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_nobody(code: str, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([*NOBODY, "/usr/bin/python3", "-c", code, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd="/")
    line = p.stdout.readline()
    if line.strip() != "held":
        p.kill()
        pytest.fail(f"nobody could not hold it: {line} {p.stderr.read()[-300:]}")
    return p


def _in_thread(fn, limit_s: float):
    """fn() in a thread: (finished within limit_s, its exception or None)."""
    box: dict = {}

    def work():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["exc"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(limit_s)
    return not t.is_alive(), box.get("exc")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_1_nobody_holding_the_metrics_lock_cannot_hang_a_root_run(shared_dir):
    """The lock of an earlier run (0644 before the fix) held by nobody through a read-only descriptor: the root
    write finishes at once, the lock it uses is 0600 and root's."""
    _need_nobody()
    samples = prometheus.samples(PRE, command="node-check", hostname="h")
    lock = shared_dir / prometheus.LOCK
    lock.write_text("")
    lock.chmod(0o644)  # what every run before round 6 left
    holder = _as_nobody(HOLD_LOCK, str(lock))
    try:
        done, exc = _in_thread(lambda: prometheus.write(shared_dir, samples, "node-check"), 20)
        assert done, "the root run blocked on the lock nobody holds"
        assert exc is None, exc
        st = os.lstat(lock)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
        assert "ddpdoctor_run_status" in (shared_dir / prometheus.FILE).read_text()
        assert stat.S_IMODE(os.stat(shared_dir / prometheus.FILE).st_mode) == 0o644  # node_exporter reads it
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.timeout(60)
def test_1_a_held_lock_is_waited_for_a_bounded_time_then_one_warning(tmp_path, monkeypatch):
    """Another root run that hangs holding the (private) lock: TimeoutError from the writer after LOCK_WAIT_S, and
    through a command one warning line with the verdict's exit code."""
    import fcntl

    monkeypatch.setattr(textfile, "LOCK_WAIT_S", 0.5)
    with textfile.Folder(tmp_path) as folder:
        fd = folder._own_lock(prometheus.LOCK)
    try:
        fcntl.flock(os.open(tmp_path / prometheus.LOCK, os.O_RDONLY), fcntl.LOCK_EX)  # held until the test ends
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="held by another process"):
            with textfile.Folder(tmp_path) as folder, folder.locked(prometheus.LOCK, wait_s=0.5):
                pass
        assert time.monotonic() - t0 < 10
        p = run_cli("preflight", "--only", "env-vars", "--no-save", "-q", "--prometheus-textfile", str(tmp_path))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "not written" in p.stderr and "held by another process" in p.stderr and "verdict stands" in p.stderr
    finally:
        os.close(fd)
