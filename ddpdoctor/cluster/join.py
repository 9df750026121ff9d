"""The cluster preflight's entry: one node's whole run (``run_node``) from the typed request. The protocol
itself is in modules a newcomer reads one at a time (PROTOCOL.md tells the whole story):

  config.py    JoinConfig, from the preflight request and the launcher's environment
  node.py      the steps every node takes (Node.run): connect, claim, meet, exchange, gather, go-ahead,
               collective, verdict; master.py and worker.py fill in the steps where the roles differ
  exchange.py  the "master publishes, nodes answer" step any cluster check can use (Check.publish)
  liveness.py  heartbeats and probe listeners: which nodes stopped answering
  progress.py  status lines on stderr
  mailbox.py   the only store client (messages.py: the message types; envelope.py: sealing)
  budget.py    every wait's limit: a node ends within 2 x --timeout + 15 s, whatever its peers do
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from ..errors import ClusterNotAssembled
from ..shared_libs import torch_damage
from . import endpoint as ep
from .budget import Budget
from .config import JoinConfig, from_request
from .launcher_env import LauncherInfo
from .master import Master
from .worker import Worker


def run_cluster(plan, request, launcher: LauncherInfo, *, quiet: bool = False,
                worker_argv: Callable[[int, int, str], list[str]] | None = None) -> dict | None:
    """The engine's door to the cluster (preflight.run): a simulated cluster on this machine
    (--local-nodes), or this node's part of a real one. None: this process is a second one on its node."""
    if request.local_nodes:
        from .local import run_local_cluster

        return run_local_cluster(request.local_nodes, timeout=request.timeout, worker_argv=worker_argv, quiet=quiet)
    cfg = from_request(request, launcher, quiet=quiet)
    if cfg is None:
        return None
    return run_node(cfg, plan)


def run_node(cfg: JoinConfig, plan) -> dict:
    """One node's whole preflight. torch is imported here, on the calling thread, before any gather thread
    starts: two threads importing torch at once abort the process (`terminate called ... python_error`)."""
    budget = Budget(cfg.timeout, start=_started())
    master_addrs = _resolve_master(cfg)
    is_master = _am_master(cfg, master_addrs)
    if cfg.nnodes > 1 and ep.is_loopback(master_addrs[0]) and not cfg.allow_loopback:
        raise ClusterNotAssembled(f"master {cfg.master} resolves to {master_addrs[0]} (loopback) but {cfg.nnodes} "
                                  f"nodes are expected; fix: {ep.FIXES[ep.LOOPBACK]}")
    # c10d reads its log level when torch loads: set here, before the import, or its socket warnings
    # ("waitForInput ... timed out") reach the terminal whatever Node.run sets later. FATAL, not ERROR: the
    # TCPStore client logs every failed connect to a master that is not ddpdoctor's (an HTTP server, junk) with
    # a C++ backtrace at ERROR before it raises, and the engine words that failure in one line
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    damage = torch_damage()  # a truncated library of torch's kills the importing process (SIGBUS): no line, no result
    if damage:
        _no_torch(f"not imported: {damage}", is_master, reinstall=True)
    try:
        _import_torch_distributed()
    except Exception as exc:  # noqa: BLE001 - a broken torch: ImportError, a missing shared library, ...
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        _no_torch(reason, is_master, exc)

    role = Master if is_master else Worker
    return role(cfg, plan, budget).run()


def _no_torch(reason: str, is_master: bool, exc: BaseException | None = None, reinstall: bool = False) -> None:
    """This node cannot join: the one line that says why (the prolog's meeting fails its node on NO_TORCH).
    ``reinstall``: torch is installed but damaged, and a plain `pip install torch` would find it there."""
    seen = "the other nodes report the master unreachable" if is_master else "the master reports it missing"
    pip = "pip install --force-reinstall torch" if reinstall else "pip install torch"
    raise ClusterNotAssembled(f"{NO_TORCH} ({reason}); the nodes meet "
                              f"on torch's TCPStore, so {seen}. Fix: `{sys.executable} -m {pip}` in "
                              "the environment the job runs in (`ddpdoctor preflight` alone lists this node's "
                              "other findings)") from exc


NO_TORCH = "this node cannot join: torch does not import here"  # the prolog's meeting fails its node on these words
STARTUP_S = 20.0  # the most of a process's start-up (interpreter, imports) the budget counts


def _started() -> float:
    """The budget counts from the process's start when the console script recorded it (2 T + 15 s is a promise
    about the whole process: a loaded node spends seconds in the interpreter and the imports), else from now; at
    most STARTUP_S back, so a command's own work before the meeting (run-trainer's, attach's) is not counted."""
    import time

    from ..lifetime import command_start

    now = time.monotonic()
    return max(command_start() or now, now - STARTUP_S)


def _import_torch_distributed() -> None:
    """torch.distributed, with the stop signals held back while it loads (lifetime.import_held)."""
    from ..lifetime import import_held

    import_held("torch.distributed")  # noqa: F401 - see run_node's docstring


def _resolve_master(cfg: JoinConfig) -> list[str]:
    res = ep.lookup("forward", cfg.master.host, cap_s=min(ep.LOOKUP_CAP_S, cfg.timeout))
    if not res["answer"]:
        raise ClusterNotAssembled(f"master {cfg.master}: {cfg.master.host!r} does not resolve "
                                  f"({res['error']}); fix: {ep.FIXES[ep.DNS]}")
    # IPv4 first, as torch's store connects
    return sorted(res["answer"], key=lambda a: ":" in a)


def _am_master(cfg: JoinConfig, master_addrs: list[str]) -> bool:
    if cfg.node_rank is not None:
        return cfg.node_rank == 0
    if cfg.nnodes == 1 and not cfg.external_store:
        return True  # the only node hosts the meeting (mpiexec -n 4 on one host: one node, rank assigned)
    if cfg.external_store:
        return False
    if cfg.local_addr:
        return cfg.local_addr in master_addrs
    import psutil

    mine = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return any(a in mine for a in master_addrs) and not any(ep.is_loopback(a) for a in master_addrs)

