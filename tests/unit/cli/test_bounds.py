"""Absurd numbers on the command line: one usage line and exit 2 (in-process)."""
from __future__ import annotations

import pytest

from tests.unit.helpers import assert_usage_error, run_cli


@pytest.mark.parametrize("args, needle", [
    (["-n", str(10**30)], "--iters"),
    (["-w", str(10**12)], "--warmup"),
    (["-b", "1T"], "-b/--min-bytes '1T'"),
    (["-e", "1e30"], "-e/--max-bytes"),
    (["-f", "nan"], "--step-factor"),
    (["--min-busbw", "nan"], "--min-busbw"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--threshold", "nan"], "--threshold"),
    (["--nproc", "100000"], "--nproc"),
    (["--localise-size", "1T"], "--localise-size"),
    (["--master", "::1:29500"], "IPv6 address needs brackets"),
    (["--master", "127.0.0.1:0"], "1..65535"),
    (["--master", "127.0.0.1:70000"], "1..65535"),
])
def test_nccl_bench_bad_numbers_exit_2(args, needle):
    assert_usage_error(run_cli("nccl-bench", "--backend", "gloo", *args), needle)


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "0"])
def test_preflight_timeout_is_finite_and_bounded(value):
    assert_usage_error(run_cli("preflight", "--timeout", value), "--timeout")


def test_preflight_set_nan_exit_2():
    assert_usage_error(run_cli("preflight", "--set", "clock-skew.warn_ms=nan"), "--set", "warn_ms", "finite")


@pytest.mark.parametrize("args, needle", [
    (["--hosts", "a,b;c"], "'b;c' is neither a host name nor an IP address"),
    (["--hosts", "node1,node 2"], "'node 2' is neither"),
    (["--master", "node0:", "--nnodes", "2"], "port after ':' is empty"),
    (["--master", "http://node0:29500", "--nnodes", "2"], "not a URL"),
])
def test_preflight_bad_hosts_and_master_exit_2(args, needle):
    assert_usage_error(run_cli("preflight", *args), needle)


def test_preflight_hosts_take_names_and_addresses():
    from ddpdoctor.cli.preflight import _hosts

    assert _hosts("node1,10.0.0.2,fe80::1,node-4.example.com") == ["node1", "10.0.0.2", "fe80::1", "node-4.example.com"]
