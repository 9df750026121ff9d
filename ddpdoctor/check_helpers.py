"""The network and measurement helpers of the plugin API (``ddpdoctor.api`` re-exports them; plugins import
them from there): thin wrappers over the engine's implementation, imported when called (the engine may move
its modules; these names and signatures are what plugins rely on), so importing them stays cheap. Every
network call has a time limit."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # types of the helpers' results, for readers and type checkers only
    from .cluster.endpoint import PingResult
    from .cluster.probe import ClockSample


def lookup_cap_s() -> float:
    """Seconds after which lookup() records a lookup as unanswered (its thread abandoned): the engine's one
    value (cluster/endpoint.py), read when asked."""
    from .cluster.endpoint import LOOKUP_CAP_S

    return LOOKUP_CAP_S



def time_exchange(host: str, port: int, samples: int = 8, timeout: float = 2.0) -> list["ClockSample"]:
    """NTP-style time samples against a node's probe listener (``node["addr"], node["probe_port"]``): each
    ``ClockSample`` has ``offset_ms`` (that node's clock minus this one's) and ``rtt_ms``; the offset's error
    bound is rtt / 2. One TCP connection, ``timeout`` seconds per step; raises OSError when it fails."""
    from .cluster.probe import time_exchange as exchange

    return exchange(host, port, samples, timeout=timeout)


def best_sample(samples: list["ClockSample"]) -> "ClockSample | None":
    """The sample with the smallest round trip (the tightest bound on its offset); None for no samples."""
    from .cluster.probe import best_sample as best

    return best(samples)


def connect_probe(host: str, port: int, timeout: float, source: str | None = None,
                  payload: bytes | None = b"P\n") -> "PingResult":
    """One TCP connect to ``host:port`` (a node's probe listener answers ``payload`` "P\\n" with "P\\n"),
    from the local address ``source`` when given; never raises. The ``PingResult`` has ``ok``, ``rtt_ms``,
    ``error_class`` (one of "refused", "timed out", "unreachable", "dns"; see ``connect_fix``) and
    ``message``. ``payload=None``: connect only."""
    from .cluster.endpoint import ping

    return ping(host, port, timeout, source=source, payload=payload)


def connect_fix(error_class: str | None) -> str:
    """What to do about a failed connect of that class (``PingResult.error_class``): a sentence with a
    command to paste; "" for an unknown class."""
    from .cluster.endpoint import FIXES

    return FIXES.get(error_class or "", "")


def lookup(kind: str, query: str, cap_s: float | None = None) -> dict:
    """A forward (``kind="forward"``: name -> sorted addresses) or reverse (``"reverse"``: address -> name)
    lookup, timed and bounded by ``cap_s`` (the resolver has no timeout of its own: the call runs on a
    daemon thread abandoned at the cap, ``LOOKUP_CAP_S`` by default). Returns ``{"kind", "query", "answer",
    "error", "seconds"}``."""
    from .cluster.endpoint import LOOKUP_CAP_S, lookup as bounded_lookup

    return bounded_lookup(kind, query, LOOKUP_CAP_S if cap_s is None else cap_s)


def is_loopback(addr: str) -> bool:
    """The address is a loopback address (127.x, ::1); False for anything that is not an IP address."""
    from .cluster.endpoint import is_loopback as loopback

    return loopback(addr)


def route_source_addr(host: str) -> str | None:
    """The local address the kernel would use to reach ``host`` (so: which interface routes there); sends
    nothing. None when there is no route."""
    from .cluster.endpoint import source_addr_towards

    return source_addr_towards(host)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as safe to publish: secret names (TOKEN, KEY, PASSWORD, ...) and
    secret-looking values become ``REDACTED``. Facts are redacted again before they leave the node; a check
    that shows env values in a message redacts them itself."""
    from .redaction import redact_env as redact

    return redact(dict(env))


def nnodes_from_world(env: Mapping[str, str]) -> int | None:
    """The node count a torchrun-style environment implies (GROUP_WORLD_SIZE, else WORLD_SIZE //
    LOCAL_WORLD_SIZE), or None."""
    from .launchers import nnodes_from_world as nnodes

    return nnodes(env)


def cuda_available() -> bool:
    """torch imports and sees at least one usable CUDA device; never raises. Costs a torch import."""
    from .devices import cuda_available as available

    return available()


def measure_collective(op: str, nbytes: int, device: Any, *, backend: str, timeout_s: float,
                       warmup: int = 1, iters: int = 3, check: bool = True, group: Any = None) -> dict | None:
    """Time one collective the way ``ddpdoctor nccl-bench`` does (same checking, timing and bus-bandwidth
    definition), inside a process group this process has already joined (``torch.distributed``).
    ``op``: "all_reduce", "all_gather", "reduce_scatter", "broadcast", ... (nccl-bench's ``--ops``);
    ``device``: a torch.device. Every rank must call it with the same arguments. Returns the row as a dict:
    ``{"op", "size", "count", ..., "out_of_place": FIGURES, "in_place": FIGURES}`` where FIGURES is
    ``{"time_us", "time_us_max", "algbw_gbs", "busbw_gbs", "wrong"}`` (``wrong``: elements that came out
    wrong, summed over ranks); None when the op does not apply (too few ranks, a size of 0 elements)."""
    from dataclasses import asdict

    from .bench.harness import BenchConfig, Context, measure

    cfg = BenchConfig(ops=[op], sizes=[nbytes], warmup=warmup, iters=iters, check=check, backend=backend,
                      timeout_s=timeout_s)
    row = measure(op, nbytes, Context(device, group), cfg)
    return asdict(row) if row is not None else None


def launcher_variables():
    """Every launcher's per-node variable families (launchers.VarFamily: name, source, names, prefixes, owns)."""
    from .launchers import VARIABLES

    return VARIABLES
