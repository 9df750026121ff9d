"""Reaching an endpoint before any store: parse HOST:PORT, connect with raw TCP, classify what went wrong.

``ping`` works for the MASTER_ADDR (rendezvous) and for peers' probe listeners alike; ``wait_for_endpoint``
retries until a deadline and then says which failure it was and what to do.
"""
from __future__ import annotations

import errno
import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError
from ..numbers import parse_int
from .budget import POLL_S, poll_delays

LOOKUP_CAP_S = 6.0  # a lookup unanswered by then is recorded so (one value; plugins read it as api.LOOKUP_CAP_S)

REFUSED, TIMED_OUT, UNREACHABLE, DNS, LOOPBACK = "refused", "timed out", "unreachable", "dns", "loopback"

FIXES = {
    DNS: "the name does not resolve on this node: use an IP address, or add it to /etc/hosts or DNS on every node",
    LOOPBACK: "MASTER_ADDR resolves to loopback, so every node would meet only itself: set --master / MASTER_ADDR "
              "to the master node's routable IP (e.g. `hostname -I` on the master), identical on every node",
    REFUSED: "nothing listens there, or a firewall REJECTs it: start the master first (node rank 0), check the "
             "port, and allow TCP between all job nodes (the rendezvous port AND the ephemeral ports NCCL/gloo use), "
             "e.g. `iptables -I INPUT -s <cluster subnet> -p tcp -j ACCEPT`",
    TIMED_OUT: "packets are silently dropped (a DROP firewall rule, a security group, or no route): ping is not "
               "proof; allow all TCP between job nodes, e.g. `iptables -I INPUT -s <cluster subnet> -p tcp -j ACCEPT`",
    UNREACHABLE: "no route to that address from this node: check `ip route get <addr>`, the interface, and that "
                 "both nodes are on a routed network",
}


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str, default_port: int | None = None) -> Endpoint:
    """HOST:PORT, [IPv6]:PORT, or HOST alone when a default port exists."""
    if not (text or "").isprintable():  # '\n', ESC, U+202E: one line here, not a resolver's two-line error
        raise UsageError(f"--master {text[:80]!r}: a control or invisible character in the host or port")
    text = (text or "").strip()
    if not text:
        raise UsageError("--master is empty: expected HOST:PORT")
    if "://" in text:
        raise UsageError(f"--master {text[:80]!r}: expected HOST:PORT, not a URL (e.g. node0:29500)")
    if text.endswith(":") and not text.endswith("::"):
        # `--master node0:$PORT` with PORT unset: a default port here could differ from the other nodes'
        raise UsageError(f"--master {text[:80]!r}: the port after ':' is empty (an unset variable?); expected HOST:PORT")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise UsageError(f"--master {text!r}: unclosed '[' in IPv6 address")
        if rest and not rest.startswith(":"):
            raise UsageError(f"--master {text!r}: expected [IPv6]:PORT")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    elif text.count(":") > 1:
        raise UsageError(f"--master {text!r}: an IPv6 address needs brackets, e.g. [fe80::1]:29500")
    else:
        host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise UsageError(f"--master {text!r}: no port; expected HOST:PORT")
        port_text = str(default_port)
    port = parse_int(port_text, lo=None, strip=False)
    if port is None:
        raise UsageError(f"--master {text!r}: port {port_text!r} is not a number")
    if not 0 < port < 65536 or not host:
        raise UsageError(f"--master {text[:80]!r}: expected HOST:PORT with a port in 1..65535")
    if not host_like(host):
        raise UsageError(f"--master {text[:80]!r}{'...' if len(text) > 80 else ''}: {host[:40]!r}... is neither an IP "
                         f"address nor a host name (letters, digits, '-', '_', '.'; at most 253 characters, 63 "
                         f"between dots)" if len(host) > 40 else
                         f"--master {text!r}: {host!r} is neither an IP address nor a host name (letters, digits, "
                         f"'-', '_', '.'; at most 253 characters, 63 between dots)")
    return Endpoint(host, port)


def host_like(host: str) -> bool:
    """An IP address or a name the resolver can take (idna refuses a label over 63 characters with a
    UnicodeError, not an OSError: caught here, as bad input)."""
    from .messages import HOST_RE

    if not host.isprintable():  # 'fe80::1%eth0\n': the scope is not looked at below
        return False
    try:
        ipaddress.ip_address(host.split("%")[0])
        return True
    except ValueError:
        return bool(HOST_RE.match(host))


def resolve(host: str) -> list[str]:
    """Addresses a name resolves to (IPv4 first); raises socket.gaierror when it does not resolve."""
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    addrs = []
    for family, *_rest, sockaddr in sorted(infos, key=lambda i: i[0] != socket.AF_INET):
        if sockaddr[0] not in addrs:
            addrs.append(sockaddr[0])
    return addrs


def lookup(kind: str, query: str, cap_s: float = LOOKUP_CAP_S) -> dict:
    """A forward (name -> sorted addresses) or reverse (address -> name) lookup, timed and bounded.

    getaddrinfo/gethostbyaddr have no timeout of their own, so the call runs in a daemon thread that is
    abandoned at the cap: {"kind", "query", "answer", "error", "seconds"}."""
    box: dict = {"kind": kind, "query": query, "answer": None, "error": None, "seconds": None}

    def work() -> None:
        start = time.perf_counter()
        try:
            if kind == "reverse":
                box["answer"] = socket.gethostbyaddr(query)[0]
            else:
                box["answer"] = sorted({i[4][0] for i in socket.getaddrinfo(query, None, proto=socket.IPPROTO_TCP)})
        except OSError as exc:
            box["error"] = f"{type(exc).__name__}: {exc}"
        box["seconds"] = round(time.perf_counter() - start, 4)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(cap_s)
    if t.is_alive():
        box.update(error=f"no answer within {cap_s:g} s", seconds=cap_s)
    return box


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return False


def classify_oserror(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return DNS
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TIMED_OUT
    code = getattr(exc, "errno", None)
    if code == errno.ECONNREFUSED:
        return REFUSED
    if code in (errno.ETIMEDOUT,):
        return TIMED_OUT
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.ENETDOWN, errno.EHOSTDOWN):
        return UNREACHABLE
    return UNREACHABLE


@dataclass
class PingResult:
    ok: bool
    error_class: str | None
    rtt_ms: float | None
    message: str = ""


def ping(host: str, port: int, timeout: float, source: str | None = None, payload: bytes | None = None) -> PingResult:
    """One TCP connect (and optional request/reply) with a timeout; never raises."""
    start = time.perf_counter()
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            if source:
                sock.bind((source, 0))
            sock.connect((host, port))
            if payload is not None:
                sock.sendall(payload)
                sock.recv(64)
        return PingResult(True, None, round((time.perf_counter() - start) * 1000, 3))
    except OSError as exc:
        return PingResult(False, classify_oserror(exc), None, f"{type(exc).__name__}: {exc}")


def source_addr_towards(host: str, port: int = 9) -> str | None:
    """The local address the kernel would use to reach ``host`` (a UDP connect sends nothing)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((host, port))
            return sock.getsockname()[0]
    except OSError:
        return None


@dataclass
class EndpointOutcome:
    ok: bool
    error_class: str | None
    addr: str | None
    attempts: int
    seconds: float
    message: str = ""

    @property
    def fix(self) -> str:
        return FIXES.get(self.error_class or "", "")


def wait_for_endpoint(
    endpoint: Endpoint,
    deadline: float,
    *,
    nnodes: int,
    allow_loopback: bool,
    attempt_timeout: float = 2.0,
    on_attempt: Callable[[int, PingResult, float], None] | None = None,
) -> EndpointOutcome:
    """Connect to the master until it answers or the deadline passes; classify the last failure.

    A name that does not resolve, or resolves to loopback while several nodes are expected, fails at once:
    waiting cannot fix either.
    """
    start = time.monotonic()
    try:
        addrs = resolve(endpoint.host)
    except socket.gaierror as exc:
        return EndpointOutcome(False, DNS, None, 0, 0.0, f"{endpoint.host!r} does not resolve: {exc}")
    addr = addrs[0]
    if nnodes > 1 and is_loopback(addr) and not allow_loopback:
        return EndpointOutcome(False, LOOPBACK, addr, 0, 0.0,
                               f"{endpoint.host} resolves to {addr} (loopback) but {nnodes} nodes are expected")
    attempts = 0
    last = PingResult(False, TIMED_OUT, None, "no attempt")
    # the nodes start together and the master listens once its torch is imported: retry soon, at most every
    # POLL_S (0.5 s beyond 64 nodes, as many connection attempts a second as before)
    delays = poll_delays(nnodes, cap=POLL_S if nnodes <= 64 else 0.5)
    while True:
        attempts += 1
        remaining = deadline - time.monotonic()
        last = ping(addr, endpoint.port, max(0.05, min(attempt_timeout, remaining)))
        if on_attempt:
            on_attempt(attempts, last, max(0.0, deadline - time.monotonic()))
        if last.ok:
            return EndpointOutcome(True, None, addr, attempts, time.monotonic() - start)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(next(delays), remaining))
    return EndpointOutcome(False, last.error_class, addr, attempts, time.monotonic() - start, last.message)
