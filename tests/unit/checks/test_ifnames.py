"""Unit tests of checks/support/ifnames.py."""
from __future__ import annotations

import pytest

from ddpdoctor_checks.support.ifnames import gloo_ifname_problem, iface_of_addr, nccl_ifname_matches


@pytest.mark.parametrize("spec,iface,expected", [
    ("eth", "eth0", True),          # prefix list
    ("eth", "ib0", False),
    ("ib,eth", "eth1", True),
    ("=eth0", "eth0", True),        # exact names
    ("=eth0", "eth01", False),
    ("^docker,lo", "docker0", False),  # exclusion by prefix
    ("^docker,lo", "eth0", True),
    ("^=eth0", "eth0", False),      # exclusion of exact names
    ("^=eth0", "eth01", True),
    (" eth ", "eth0", True),
])
def test_nccl_ifname_syntax(spec, iface, expected):
    assert nccl_ifname_matches(spec, iface) is expected


@pytest.mark.parametrize("value", ["eth0,ib0", "^lo", "=eth0"])
def test_gloo_rejects_nccl_syntax(value):
    assert "one concrete interface" in gloo_ifname_problem(value)


def test_gloo_accepts_a_plain_name():
    assert gloo_ifname_problem("eth0") is None


def test_iface_of_loopback_address():
    found = iface_of_addr("127.0.0.1")
    assert found["addr"] == "127.0.0.1" and found["iface"]  # "lo" on Linux
    assert iface_of_addr(None) is None
    assert iface_of_addr("192.0.2.254")["iface"] is None  # TEST-NET address held by no interface


def test_any_127_address_is_on_the_loopback_interface():
    # lo holds 127.0.0.1/8: a master on --local-addr 127.0.0.2 reaches itself through lo, like its peers do
    # (it once read as "iface None" and warned "reaches some peers through lo, the master through None").
    assert iface_of_addr("127.0.0.2")["iface"] == iface_of_addr("127.0.0.1")["iface"]
    assert iface_of_addr("127.3.4.5")["mtu"] == iface_of_addr("127.0.0.1")["mtu"]
