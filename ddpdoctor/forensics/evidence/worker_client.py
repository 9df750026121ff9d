"""Collecting evidence from live ranks: torch's worker server in each (started by the bootstrap) answers over
a unix socket from a C++ thread, so a rank blocked inside a collective still gives its stacks and flight
recorder; what does not answer is judged from outside (process state, py-spy)."""
from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path

import psutil



class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def ask(path: str | os.PathLike, handler: str, timeout: float = 5.0) -> str | None:
    """POST /handler/<name> on a worker server's socket (torch.distributed.debug's protocol); None: no answer."""
    return _request(path, "POST", f"/handler/{handler}", timeout)


def handler_names(path: str | os.PathLike, timeout: float = 5.0) -> list | None:
    """The handlers the rank's torch registered (GET /handler/, torch's WorkerServer.cpp: a JSON list)."""
    body = _request(path, "GET", "/handler/", timeout)
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _request(path: str | os.PathLike, method: str, url: str, timeout: float) -> str | None:
    conn = _UnixHTTP(str(path), timeout)
    try:
        conn.request(method, url)
        resp = conn.getresponse()
        body = resp.read().decode(errors="replace")
        return body if resp.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


_INSTANCES = None  # fr_backends.Memo: this process's ranks' instances, by socket path (made at first use)


def flight_record(path: str | os.PathLike, timeout: float = 5.0) -> dict | None:
    """The rank's flight recorder (torch's `fr_trace_json` handler: entries and per-group status), every
    instance its torch keeps (ProcessGroupNCCL's on a CUDA build, 2.15's one per backend), merged
    (fr_backends.py); which ones from its handler names, asked once per rank. The default instance first: a
    rank that does not answer it is not asked the others."""
    from . import fr_backends

    global _INSTANCES
    if _INSTANCES is None:
        _INSTANCES = fr_backends.Memo()

    def one(handler: str) -> dict | None:
        body = ask(path, handler, timeout)
        try:
            return json.loads(body) if body else None
        except ValueError:
            return None

    instances = _INSTANCES.of(str(path), lambda: handler_names(path, timeout))
    return fr_backends.gather(one, instances)


def completed(fr: dict | None) -> int | None:
    """How many collectives the rank has completed, over all its process groups (its progress); None before
    its first collective, when the record has no process group yet: the rank is still starting (importing,
    building its model, `import torch._dynamo` inside DDP takes seconds on a loaded node), which is no hang."""
    if not fr or not fr.get("pg_status"):
        return None
    total = 0
    for status in (fr.get("pg_status") or {}).values():
        try:
            total += max(0, int(status.get("last_completed_collective", -1)))
        except (TypeError, ValueError):
            continue
    return total


def waiting(fr: dict | None) -> bool:
    """The rank has entered a collective that has not completed (enqueued above completed, in any group)."""
    for status in ((fr or {}).get("pg_status") or {}).values():
        try:
            if int(status.get("last_enqueued_collective", -1)) > int(status.get("last_completed_collective", -1)):
                return True
        except (TypeError, ValueError, AttributeError):
            continue
    return False


def pending_deadline(fr: dict | None) -> tuple[float, float] | None:
    """(when, in epoch seconds, the rank's oldest pending collective hits its process group's timeout; that
    timeout in seconds). Pending: a sequence id above the group's last completed one. Every flight-recorder
    entry carries ``timeout_ms`` and ``time_created_ns`` (wall clock), gloo's and NCCL's alike."""
    if not fr:
        return None
    done = {}
    for pg, status in (fr.get("pg_status") or {}).items():
        try:
            done[str(pg)] = int(status.get("last_completed_collective", -1))
        except (TypeError, ValueError, AttributeError):
            continue
    from .flight_recorder import status_numbers

    numbers = status_numbers(fr)
    best = None
    for e in fr.get("entries") or []:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        try:
            pg = str(e.get("pg_id", (e.get("process_group") or ["0"])[0]))
            seq = int(e[numbers.get(pg, "collective_seq_id")])
            created, limit = int(e["time_created_ns"]) / 1e9, int(e["timeout_ms"]) / 1e3
        except (KeyError, TypeError, ValueError, IndexError):
            continue
        if limit <= 0 or seq <= done.get(pg, -1):
            continue
        if best is None or created + limit < best[0]:
            best = (created + limit, limit)
    return best


def process_state(pid: int | None) -> str:
    """'running', 'gone', 'stopped' (SIGSTOP), 'disk-sleep' (D state, stuck in the kernel), 'zombie'."""
    if pid is None:
        return "gone"
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return "gone"
    return {psutil.STATUS_STOPPED: "stopped", psutil.STATUS_TRACING_STOP: "stopped",
            psutil.STATUS_DISK_SLEEP: "disk-sleep", psutil.STATUS_ZOMBIE: "zombie",
            psutil.STATUS_DEAD: "gone"}.get(status, "running")


def rank_sockets(template: str, ranks: list[int]) -> dict[int, Path]:
    return {r: Path(template.replace("{rank}", str(r))) for r in ranks}


