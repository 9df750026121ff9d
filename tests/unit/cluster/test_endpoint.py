"""Unit tests of ddpdoctor/cluster/endpoint.py."""
from __future__ import annotations

import errno
import socket
import time

import pytest

from ddpdoctor.cluster import endpoint as ep
from ddpdoctor.errors import UsageError


@pytest.mark.parametrize("text,host,port", [
    ("node0:29500", "node0", 29500), ("10.0.0.1:1", "10.0.0.1", 1), ("[fe80::1]:29500", "fe80::1", 29500),
    ("node0", "node0", 29400),
])
def test_parse_endpoint(text, host, port):
    e = ep.parse_endpoint(text, default_port=29400)
    assert (e.host, e.port) == (host, port)


@pytest.mark.parametrize("text,needle", [
    ("", "empty"), ("node0:http", "not a number"), ("node0:0", "1..65535"), ("fe80::1:29500", "brackets"),
    ("[fe80::1:29500", "unclosed"), ("node0", "no port"),
])
def test_bad_endpoints(text, needle):
    with pytest.raises(UsageError, match=needle):
        ep.parse_endpoint(text)


@pytest.mark.parametrize("text,needle", [
    # `--master node0:$PORT` with PORT unset once ran on the default port, maybe not the other nodes' port
    ("node0:", "port after ':' is empty"), ("[fe80::1]:", "port after ':' is empty"),
    # a URL once read "an IPv6 address needs brackets"
    ("http://node0:29500", "not a URL"), ("tcp://10.0.0.1:29500", "not a URL"),
])
def test_an_empty_port_or_a_url_is_bad_input_even_with_a_default_port(text, needle):
    with pytest.raises(UsageError, match=needle):
        ep.parse_endpoint(text, default_port=29500)


def test_str_brackets_ipv6():
    assert str(ep.Endpoint("fe80::1", 5)) == "[fe80::1]:5" and str(ep.Endpoint("h", 5)) == "h:5"


@pytest.mark.parametrize("exc,cls", [
    (socket.gaierror(-2, "Name or service not known"), ep.DNS),
    (socket.timeout("timed out"), ep.TIMED_OUT),
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), ep.REFUSED),
    (OSError(errno.EHOSTUNREACH, "no route"), ep.UNREACHABLE),
    (OSError(errno.ENETUNREACH, "unreachable"), ep.UNREACHABLE),
])
def test_failure_classes(exc, cls):
    assert ep.classify_oserror(exc) == cls
    assert ep.FIXES[cls]


def test_closed_port_is_refused_at_once_and_the_wait_is_bounded():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        res = ep.ping("127.0.0.1", port, 1.0)
        assert not res.ok and res.error_class == ep.REFUSED
        start = time.monotonic()
        out = ep.wait_for_endpoint(ep.Endpoint("127.0.0.1", port), time.monotonic() + 1.5, nnodes=2,
                                   allow_loopback=True)
        assert not out.ok and out.error_class == ep.REFUSED and out.attempts >= 1
        assert time.monotonic() - start < 1.5 + 8.5  # its deadline; 8.5 s: a late thread on a loaded box


def test_loopback_master_with_several_nodes_fails_without_waiting():
    start = time.monotonic()
    out = ep.wait_for_endpoint(ep.Endpoint("localhost", 29500), time.monotonic() + 30, nnodes=2,
                               allow_loopback=False)
    assert not out.ok and out.error_class == ep.LOOPBACK
    assert time.monotonic() - start < 0 + 9  # no wait at all; 9 s: a late thread on a loaded box


def test_unresolvable_master_fails_at_once_as_dns():
    out = ep.wait_for_endpoint(ep.Endpoint("no-such-host.invalid", 29500), time.monotonic() + 30, nnodes=2,
                               allow_loopback=False)
    assert not out.ok and out.error_class == ep.DNS and out.attempts == 0
    assert "no-such-host.invalid" in out.message and "/etc/hosts" in out.fix


def test_wait_reports_progress_and_succeeds_when_the_master_listens():
    seen = []
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        out = ep.wait_for_endpoint(ep.Endpoint("127.0.0.1", srv.getsockname()[1]), time.monotonic() + 10, nnodes=2,
                                   allow_loopback=True, on_attempt=lambda n, res, left: seen.append((n, res.ok, left)))
    assert out.ok and out.error_class is None and out.attempts == 1 and out.addr == "127.0.0.1"
    assert seen and seen[0][0] == 1 and seen[0][1] is True and 0 < seen[0][2] <= 10


def test_refused_wait_keeps_trying_until_the_deadline():
    seen = []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        out = ep.wait_for_endpoint(ep.Endpoint("127.0.0.1", s.getsockname()[1]), time.monotonic() + 1.2, nnodes=2,
                                   allow_loopback=True, on_attempt=lambda n, res, left: seen.append(n))
    assert out.error_class == ep.REFUSED and out.attempts >= 2 and seen == list(range(1, out.attempts + 1))
    assert out.seconds >= 1.0 and "start the master first" in out.fix


def test_ipv6_endpoint_and_loopback_detection():
    e = ep.parse_endpoint("[::1]:29500")
    assert (e.host, e.port, str(e)) == ("::1", 29500, "[::1]:29500")
    assert ep.is_loopback("::1") and ep.is_loopback("127.0.1.1") and not ep.is_loopback("10.0.0.1")
    assert not ep.is_loopback("not-an-address")


def test_junk_after_ipv6_bracket_is_a_usage_error():
    from ddpdoctor.errors import UsageError

    with pytest.raises(UsageError):
        ep.parse_endpoint("[::1]29501", default_port=29500)


@pytest.mark.parametrize("text", ["h" * 300 + ":29500", "a." + "b" * 100 + ":1", "ev il:29500"])
def test_a_host_the_resolver_would_refuse_is_bad_input(text):
    from ddpdoctor.cluster.endpoint import parse_endpoint
    from ddpdoctor.errors import UsageError

    with pytest.raises(UsageError, match="neither an IP address nor a host name"):
        parse_endpoint(text)
