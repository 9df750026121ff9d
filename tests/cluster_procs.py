"""Real node processes for the hostile-store and fault tests: `ddpdoctor preflight` per node on 127.0.0.x,
their output drained by threads (so a stopped or killed node never blocks the test), every process group
killed (SIGCONT first, for a stopped one) in the fixture's finalizer.

Also a hostile client: a TCPStore client in the test process, under the protocol's prefix, that reads the
master's hello and writes what it likes.
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.cluster import envelope, mailbox, messages
from ddpdoctor.cluster.budget import SLACK_S
from ddpdoctor.cluster.local import free_port
from tests import zygote

ESC = "\x1b"
STARTUP_SLACK_S = 8.0  # interpreter + torch import on a loaded 2-core box, before the node's budget starts


def budget_s(timeout: float) -> float:
    """Wall time a node may take from its process start: the documented budget plus start-up."""
    return 2 * timeout + SLACK_S + STARTUP_SLACK_S


class Node:
    """One node process; stdout/stderr collected by threads, its exit time recorded by another."""

    def __init__(self, rank: int, argv: list[str], env: dict, cwd: str | None = None):
        self.rank = rank
        self.argv = argv
        self.started = time.monotonic()
        self.proc = zygote.popen(argv, env, cwd)  # forked from a torch-imported server where that is the same
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.ended: float | None = None
        self._new_line = threading.Condition()
        self._threads = [threading.Thread(target=self._drain, args=(self.proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stderr, self.err), daemon=True),
                         threading.Thread(target=self._reap, daemon=True)]
        for t in self._threads:
            t.start()

    def _drain(self, pipe, sink: list[bytes]) -> None:
        for line in iter(pipe.readline, b""):
            with self._new_line:
                sink.append(line)
                self._new_line.notify_all()
        pipe.close()

    def _reap(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()
        with self._new_line:
            self._new_line.notify_all()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout(self) -> str:
        return b"".join(self.out).decode(errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(self.err).decode(errors="replace")

    @property
    def raw(self) -> bytes:
        return b"".join(self.out) + b"".join(self.err)

    def wait_for_line(self, text: str, limit_s: float) -> bool:
        """True once stderr has a line containing text; False at the limit or when the process ended."""
        end = time.monotonic() + limit_s
        with self._new_line:
            while True:
                if any(text in line.decode(errors="replace") for line in self.err):
                    return True
                left = end - time.monotonic()
                if left <= 0 or self.ended is not None:
                    return any(text in line.decode(errors="replace") for line in self.err)
                self._new_line.wait(min(left, 0.5))

    def finish(self, limit_s: float) -> int | None:
        """The exit code, or None when still running at the limit (the caller fails the test)."""
        try:
            self.proc.wait(timeout=max(0.1, limit_s))
        except subprocess.TimeoutExpired:
            return None
        for t in self._threads:
            t.join(5)
        return self.proc.returncode

    @property
    def elapsed(self) -> float | None:
        return None if self.ended is None else self.ended - self.started

    def doc(self) -> dict | None:
        """The node's JSON document: from --output's dir when it was given, else from stdout (--json)."""
        if "--output" in self.argv:
            found = sorted(Path(self.argv[self.argv.index("--output") + 1]).glob("*.json"))
            return json.loads(found[0].read_text()) if found else None
        try:
            return json.loads(self.stdout) if self.stdout.strip() else None
        except json.JSONDecodeError:
            return None

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)  # a stopped process dies of SIGKILL too, but leave nothing frozen
            self.signal(signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def describe(self) -> str:
        return f"rank {self.rank} exit {self.proc.returncode} after {self.elapsed}s\n--stderr--\n{self.stderr[-3000:]}"


class Cluster:
    """Nodes of one simulated cluster: rank r listens on 127.0.0.(r+1); the master's store on 127.0.0.1."""

    def __init__(self, nnodes: int, registry: list[Node], hostiles: list, home: str | None = None):
        self.nnodes = nnodes
        self.home = home  # the home directory every node shares (the run's key file goes there)
        self._hostiles = hostiles
        self.port = free_port()
        self.nodes: dict[int, Node] = {}
        self._registry = registry

    @property
    def master(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, rank: int, *extra: str, only: str = "mesh,launch-args", timeout: float = 15,
              token: str | None = None, json_out: bool = True, env: dict | None = None,
              output: str | None = None, prefix: tuple[str, ...] = ()) -> Node:
        """``json_out`` False: the terminal output (the view a person reads); ``output`` a dir for the JSON;
        ``prefix`` what the command runs under (another user: tests/as_nobody.py), never forked then."""
        argv = [*prefix, sys.executable, "-m", "ddpdoctor", "preflight", "--master", self.master, "--nnodes", str(self.nnodes),
                "--node-rank", str(rank), "--local-addr", f"127.0.0.{rank + 1}", "--timeout", str(timeout),
                "--only", only, *(["--json"] if json_out else []), *(["--token", token] if token else []),
                *(["--output", output] if output else []), *extra]
        base = dict(os.environ, PYTHONUNBUFFERED="1", **({"HOME": self.home} if self.home else {}))
        node = Node(rank, argv, dict(base, **(env or {})))
        self.nodes[rank] = node
        self._registry.append(node)
        return node

    def start_master(self, *extra: str, tries: int = 3, **kw) -> Node:
        """Rank 0, once it hosts its store. A port from free_port() can be taken by someone's outgoing
        connection before the master binds it (EADDRINUSE, seen with many tests at once): then a new one."""
        for _ in range(tries):
            node = self.start(0, *extra, **kw)
            if node.wait_for_line("hosting the rendezvous store", 60):
                return node
            if node.finish(10) is not None and "address already in use" in node.stderr:
                self.port = free_port()
                continue
            break
        raise AssertionError(f"the master never hosted its store\n{self.report()}")

    def hostile(self) -> "Hostile":
        h = Hostile(self.port)
        self._hostiles.append(h)
        return h

    def finish(self, limit_s: float) -> dict[int, int | None]:
        end = time.monotonic() + limit_s
        return {r: n.finish(end - time.monotonic()) for r, n in self.nodes.items()}

    def report(self) -> str:
        return "\n".join(n.describe() for n in self.nodes.values())


@pytest.fixture
def cluster(tmp_path_factory):
    """make(n) -> Cluster; every process any of them started is killed (SIGCONT, SIGKILL) at teardown. The
    nodes share a home directory of the test's own (a killed master's key file stays out of the user's)."""
    started: list[Node] = []
    made: list[Cluster] = []
    stores: list[Hostile] = []

    def make(n: int) -> Cluster:
        c = Cluster(n, started, stores, home=str(tmp_path_factory.mktemp("home")))
        made.append(c)
        return c

    yield make
    for h in stores:
        h.close()
    for node in started:
        node.kill()


class Hostile:
    """A client of the master's store that is no node: it writes under the protocol's keys."""

    def __init__(self, port: int, *, limit_s: float = 30.0):
        import torch.distributed as dist

        self.raw = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=limit_s))
        self.store = dist.PrefixStore(mailbox.PREFIX, self.raw)

    def close(self) -> None:
        self.store = None
        self.raw = None

    def wait(self, key: str, limit_s: float = 30.0) -> bytes:
        import datetime as dt

        self.store.wait([key], dt.timedelta(seconds=limit_s))
        return self.store.get(key)

    def run_nonce(self, token: str | None) -> str:
        """The live master's run nonce, read from its hello (the hello is readable by anyone)."""
        for frame in envelope.frames(self.wait("hello")):
            try:  # without a token: the hello may be signed with the run's own key, unknown to an outsider
                _, body = envelope.open_envelope(frame, token=token, run=None, key="hello", sender=None,
                                                from_master=True, blind=token is None)
            except messages.Invalid:
                continue
            return body["nonce"]
        raise AssertionError("no hello from the master")

    def append(self, key: str, frame: bytes) -> None:
        self.store.append(key, b"\n" + frame + b"\n")

    def append_raw(self, key: str, data: bytes) -> None:
        self.store.append(key, data)

    def add(self, key: str, delta: int = 1) -> int:
        return self.store.add(key, delta)


def sealed(body: dict, *, key: str, sender: tuple[int, int], run: str, token: str | None) -> bytes:
    return envelope.seal(body, token=token, run=run, key=key, sender=messages.Slot(*sender))


def identity(rank: int, claim: int, *, host: str = "impostor", addr: str = "127.0.0.9", **over) -> dict:
    """A schema-valid identity for rank/claim (what a real node posts), with fields overridden."""
    body = {"rank": rank, "claim": claim, "host": host, "fqdn": host, "addr": addr, "probe_port": 9,
            "pid": 4242, "boot_id": None, "tool_version": "0", "launcher": None, "fresh": "ab" * 16,
            "launch": {"nnodes": 2, "nproc_per_node": None, "rdzv_id": None, "endpoint": "127.0.0.1:1"},
            "checks": ["launch-args", "mesh"]}
    body.update(over)
    return body


def cluster_results(doc: dict | None) -> list[dict]:
    return [r for r in (doc or {}).get("results", []) if r.get("check") == "cluster"]


def assert_clean(node: Node) -> None:
    """No traceback, no abort, no raw escape sequence on any stream of this node."""
    text = node.stdout + node.stderr
    assert "Traceback" not in text, node.describe()
    assert "terminate called" not in text, node.describe()
    assert ESC.encode() not in node.raw, node.describe()
    assert node.proc.returncode not in (4, -6, 134), node.describe()


def alive(pids) -> list[int]:
    """Of ``pids``, the processes still running (a zombie, waiting for its parent to reap it, is gone)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out
