"""The cluster run's settings (``JoinConfig``), built from the typed preflight request and the launcher's
environment, detected once by the caller (``launcher_env.detect``); flags always win over the launcher."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..inputs import MAX_NODES
from . import endpoint as ep
from .launcher_env import LauncherInfo
from .messages import HOST_RE


@dataclass
class JoinConfig:
    master: ep.Endpoint
    nnodes: int
    node_rank: int | None
    local_addr: str | None
    timeout: float
    token: str | None = None
    nproc_per_node: int | None = None
    rdzv_id: str | None = None
    code_dir: str | None = None
    shared_dir: str | None = None
    external_store: bool = False  # torchrun's agent hosts the store: every node is a client
    launcher: str | None = None
    quiet: bool = False
    hosts: list[str] | None = None  # the job's hosts, from the launcher or --hosts: names the missing ones
    node_command: str | None = None  # what to start on a missing node (None: this preflight's own command)
    allow_unauthenticated: bool = False  # the master takes nodes that cannot prove the run's key (said, not verified)

    @property
    def allow_loopback(self) -> bool:
        """Loopback is fine for a simulated node on loopback, or when torchrun's agents already met there."""
        return bool(self.local_addr and ep.is_loopback(self.local_addr)) or self.external_store



def from_request(request, launcher: LauncherInfo, *, quiet: bool = False) -> JoinConfig | None:
    """``request`` is a preflight.PreflightRequest; ``launcher`` what this node's launcher says
    (request.launcher()). Returns None when this process should not run a node preflight (a second process
    on this node under torchrun, mpiexec or srun: local rank 0 speaks for the node)."""
    info = launcher
    if info.another_speaks:
        return None  # one preflight per node
    master_text = request.master or info.master
    if not master_text:
        raise UsageError("no master endpoint: pass --master HOST:PORT (or set MASTER_ADDR and MASTER_PORT)")
    endpoint = ep.parse_endpoint(master_text, default_port=29500)
    nnodes = _nnodes(request.nnodes, info)
    node_rank = request.node_rank if request.node_rank is not None else info.node_rank
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank {node_rank} is not in 0..{nnodes - 1} (--nnodes {nnodes})")
    _check_paths(request)
    return JoinConfig(
        master=endpoint, nnodes=nnodes, node_rank=node_rank, local_addr=request.local_addr,
        timeout=request.timeout, token=request.token or None,
        nproc_per_node=request.nproc_per_node or info.nproc_per_node, rdzv_id=request.rdzv_id,
        code_dir=request.code_dir, shared_dir=request.shared_dir, external_store=info.source == "torchrun",
        launcher=info.source, quiet=quiet, hosts=info.hosts, node_command=request.node_command,
        allow_unauthenticated=bool(getattr(request, "allow_unauthenticated", False)),
    )


def _nnodes(given: int | None, info: LauncherInfo) -> int:
    where = "--nnodes" if given else f"the node count from the {info.source} environment"
    nnodes = given or info.nnodes
    if not nnodes:
        raise UsageError("number of nodes unknown: pass --nnodes N")
    if not 1 <= nnodes <= MAX_NODES:
        raise UsageError(f"{where} {nnodes}: expected 1..{MAX_NODES}")
    return nnodes


def _check_paths(request) -> None:
    if request.shared_dir is not None and not Path(request.shared_dir).is_dir():
        raise UsageError(f"--shared-dir {request.shared_dir}: not a directory on this node")
    if request.code_dir is not None and not Path(request.code_dir).is_dir():
        raise UsageError(f"--code {request.code_dir}: not a directory")
    if request.local_addr is not None and not address_like(request.local_addr):
        raise UsageError(f"--local-addr {request.local_addr!r}: expected an IP address or a host name of this node")


def address_like(text: str) -> bool:
    """An IP address or a host name (--local-addr, a --hosts entry); never one with a control character."""
    if not text.isprintable():
        return False
    try:
        ipaddress.ip_address(text.split("%")[0])
        return True
    except ValueError:
        return bool(HOST_RE.match(text))
