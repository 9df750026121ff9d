"""A fork server for simulated nodes: one interpreter per test process imports torch once, and each
`python -m ddpdoctor ...` node the tests start is forked from it instead of importing torch again.

Why: the suite is CPU-bound on CI's 2 cores, and about 1.5-2.5 s of CPU per node process is `import torch`
(tests/README.md, "Time"). A forked node runs the same `python -m ddpdoctor` code path (runpy, the real
argv, environment, working directory, its own session and stdio pipes, exit status as Popen reports it), the
way a DataLoader worker is forked after torch is imported. What happens at interpreter start or while torch
imports cannot be replayed after a fork, so `eligible` sends those nodes to a real exec: another
interpreter, an LD_PRELOAD (faketime), a PYTHON*/TORCH_*/OMP_* or locale variable unlike the server's.
`DDPDOCTOR_TEST_NO_FORK=1` execs every node.

The server is single-threaded on its side (fork copies only the calling thread): it reads spawn requests
from a SOCK_SEQPACKET socket (the node's stdin/stdout/stderr come with them as passed file descriptors),
reaps its children and reports their exit, and on end-of-file kills what it started and exits.
"""
from __future__ import annotations

import io
import json
import locale
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# read when the interpreter starts or while torch loads: a node that differs from the server here is exec'd
STARTUP_PREFIXES = ("PYTHON", "LD_", "TORCH_", "OMP_", "MKL_", "KMP_", "FAKETIME", "LC_", "LANG", "TZ")
SERVER_ENV = {"PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}  # what cluster nodes get anyway
MAX_MESSAGE = 1 << 20


# ---- the server (its own process) -------------------------------------------------------------------------

def serve(fd: int) -> None:
    """Import torch, say ready, then fork a node per request until the test process goes away."""
    import torch  # noqa: F401 - the point of this process
    import torch.distributed  # noqa: F401

    sock = socket.socket(fileno=fd)
    sock.sendall(json.dumps({"ready": os.getpid()}).encode())
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([sock], [], [], 0.05)
        _reap(children, sock)
        if not readable:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        if not msg:  # the test process closed its end (or died): leave nothing behind
            _kill_all(children)
            return
        started_r, started_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(started_r)
            _become_node(json.loads(msg), fds, started_w)  # raises SystemExit out of serve(): the node's own exit
        os.close(started_w)
        os.read(started_r, 1)  # as Popen: the pid goes back once the child has its session and stdio
        os.close(started_r)
        for f in fds:
            os.close(f)
        children.add(pid)
        sock.sendall(json.dumps({"spawned": pid}).encode())


def _reap(children: set[int], sock: socket.socket) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        sock.sendall(json.dumps({"exited": pid, "rc": os.waitstatus_to_exitcode(status)}).encode())


def _kill_all(children: set[int]) -> None:
    """SIGKILL every child's session (what it started too), and the child itself: one just forked may not have
    made its session yet."""
    for pid in children:
        for kill, sig in ((os.killpg, signal.SIGCONT), (os.killpg, signal.SIGKILL), (os.kill, signal.SIGKILL)):
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _become_node(req: dict, fds: list[int], started: int) -> None:
    """In the forked child: what `python -m ddpdoctor ARGS` in a new session would be, then run it."""
    import random
    import runpy

    os.setsid()  # start_new_session=True, as Popen gives the exec'd nodes
    for target, f in enumerate(fds):
        os.dup2(f, target)
    for f in fds:
        if f > 2:
            os.close(f)
    os.chdir(req["cwd"])
    os.close(started)
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [req["argv"][2]] + req["argv"][3:]
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    random.seed()  # a fresh interpreter's own seed, not the server's state shared by every child
    runpy.run_module(req["argv"][2], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


# ---- the client (in the test process) ---------------------------------------------------------------------

def eligible(argv: list[str], env: dict) -> bool:
    if os.environ.get("DDPDOCTOR_TEST_NO_FORK") == "1" or env.get("DDPDOCTOR_TEST_NO_FORK") == "1":
        return False
    if argv[:3] != [sys.executable, "-m", "ddpdoctor"]:
        return False
    server_env = dict(os.environ, **SERVER_ENV)
    env = dict(env)
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # what a node sets itself before it imports torch (cluster/join)
    keys = {k for k in (*env, *server_env) if k.startswith(STARTUP_PREFIXES)}
    return all(env.get(k) == server_env.get(k) for k in keys)


class ForkedProc:
    """The part of subprocess.Popen the node helpers use, for a node the server forked."""

    def __init__(self, pid: int | None, stdout, stderr):  # pid: None until the server has forked it
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._done = threading.Event()
        self._read: list | None = None

    def _exited(self, rc: int) -> None:
        self.returncode = rc
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked node {self.pid}", timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple:
        """Both streams to their end, then the exit status: (stdout, stderr), as Popen's."""
        end = None if timeout is None else time.monotonic() + timeout
        if self._read is None:
            self._read = [None, None]
            self._readers = [threading.Thread(target=self._slurp, args=(i, f), daemon=True)
                             for i, f in enumerate((self.stdout, self.stderr))]
            for t in self._readers:
                t.start()
        for t in self._readers:
            t.join(None if end is None else max(0.0, end - time.monotonic()))
        if any(t.is_alive() for t in self._readers):
            raise subprocess.TimeoutExpired(f"forked node {self.pid}", timeout)
        self.wait(None if end is None else max(0.1, end - time.monotonic()))
        return tuple(self._read)

    def _slurp(self, i: int, stream) -> None:
        self._read[i] = stream.read()
        stream.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)


def _stream(fd: int, text: bool):
    """A pipe's reading end as Popen gives it: bytes, or text in the locale's encoding with text=True."""
    raw = os.fdopen(fd, "rb")
    return io.TextIOWrapper(raw, encoding=locale.getpreferredencoding(False)) if text else raw


class Server:
    """The client's end: start the server once, send spawn requests, route exit reports to their nodes."""

    def __init__(self):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-c", f"from tests.zygote import serve; serve({theirs.fileno()})"],
                                     pass_fds=[theirs.fileno()], cwd=ROOT, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, **SERVER_ENV))
        theirs.close()
        self.sock = mine
        self._lock = threading.Lock()  # one spawn at a time: the next "spawned" is the pending node's
        self._got = threading.Condition()
        self._pending: ForkedProc | None = None
        self._procs: dict[int, ForkedProc] = {}
        mine.settimeout(120)
        ready = json.loads(mine.recv(MAX_MESSAGE) or b"{}")
        if "ready" not in ready:
            raise RuntimeError("the fork server did not start")
        mine.settimeout(None)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                msg = self.sock.recv(MAX_MESSAGE)
            except OSError:
                msg = b""
            if not msg:
                return
            event = json.loads(msg)
            with self._got:
                if "spawned" in event:  # always before that node's "exited": the server sends both, in order
                    self._pending.pid = event["spawned"]
                    self._procs[self._pending.pid], self._pending = self._pending, None
                else:
                    self._procs.pop(event["exited"])._exited(event["rc"])
                self._got.notify_all()

    def spawn(self, argv: list[str], env: dict, cwd: str | None, text: bool = False) -> ForkedProc:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        req = json.dumps({"argv": argv, "env": env, "cwd": cwd or os.getcwd()}).encode()
        proc = ForkedProc(None, _stream(out_r, text), _stream(err_r, text))
        with self._lock:
            with self._got:
                self._pending = proc
            try:
                socket.send_fds(self.sock, [req], [null, out_w, err_w])
            finally:
                for f in (null, out_w, err_w):
                    os.close(f)
            with self._got:
                if not self._got.wait_for(lambda: proc.pid is not None, timeout=60):
                    raise RuntimeError("the fork server did not answer")
        return proc

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: Server | None = None
_server_lock = threading.Lock()


def popen(argv: list[str], env: dict, cwd: str | None = None, text: bool = False):
    """Popen(argv, stdout=PIPE, stderr=PIPE, env=env, cwd=cwd, start_new_session=True, text=text), forked when
    eligible."""
    global _server
    if not eligible(argv, env):
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                                start_new_session=True, text=text)
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            _server = Server()
        server = _server
    return server.spawn(argv, env, cwd, text)
