"""Numbers and config under the input policy: finite, bounded, of the right type, or exit 2 in one line.

Check options (api.Option), ddpdoctor.toml [run] and [checks.NAME], the shared FiniteFloat click type, the
nccl-bench sizes and counts, and --timeout on preflight and nccl-bench, in-process and through the CLI.
"""
from __future__ import annotations

import math
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from ddpdoctor import settings
from ddpdoctor.api import Option
from ddpdoctor.bench.sizes import MAX_BUFFER_BYTES, parse_size
from ddpdoctor.cli.common import TIMEOUT, FiniteFloat
from ddpdoctor.errors import UsageError


def run_cli(*args, timeout=90):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True, timeout=timeout)


def assert_usage_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- check options -------------------------------------------------------------------------------------

@pytest.mark.parametrize("default, value, expected", [
    (8, "10", 10), (8, 10.0, 10), (8, 0, 0), (1.0, "2.5", 2.5), (1.0, 3, 3.0), (True, "off", False),
    (True, False, False), ("warn", "fail", "fail"),
])
def test_option_accepts_sound_values(default, value, expected):
    got = Option(default, "").convert(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("default, value, needle", [
    (8, True, "expected a number"),  # bool is an int in Python, not here
    (8, 2.5, "whole number"),
    (8, "soon", "expected a number"),
    (1.0, "nan", "finite"), (1.0, math.nan, "finite"), (1.0, math.inf, "finite"), (1.0, "-inf", "finite"),
    (1.0, "1e999", "finite"),
    (1.0, -1, "below the minimum"),
    (8, 10**30, "above the maximum"),
    (1.0, [1], "expected a number"), (1.0, {"a": 1}, "expected a number"),
    (True, 5, "true/false"), (True, "maybe", "true/false"),
    ("warn", 5, "expected a string"),
])
def test_option_rejects_wrong_types_and_absurd_numbers(default, value, needle):
    with pytest.raises(ValueError, match=needle):
        Option(default, "").convert(value)


def test_option_bounds_are_per_option():
    assert Option(0.0, "", min=-10).convert(-5) == -5.0
    with pytest.raises(ValueError, match="above the maximum 5"):
        Option(1, "", max=5).convert(6)


# -- ddpdoctor.toml -------------------------------------------------------------------------------------

def _resolve(tmp_path, text):
    from ddpdoctor.registry import discover

    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text(text)
    file_cfg = settings.read_toml(str(cfg))
    settings.resolve_check_options(discover(), file_cfg, {}, str(cfg))
    return settings.resolve_run(file_cfg, {}, str(cfg))


@pytest.mark.parametrize("text, needle", [
    ("run = 5", "key 'run' must be the [run] table"),
    ("checks = 5", "key 'checks' must be a table"),
    ("[checks]\nclock-skew = 5", "checks.clock-skew must be a table"),
    ('[run]\ntimeout = "soon"', "bad value for run.timeout: expected a number"),
    ("[run]\ntimeout = nan", "run.timeout: expected a finite number"),
    ("[run]\ntimeout = 0.5", "run.timeout: 0.5 is below the minimum 1"),
    ("[run]\ntimeout = 1e300", "run.timeout"),
    ("[run]\ngpus_per_node = true", "bad value for run.gpus_per_node: expected a number, got True"),
    ("[run]\ngpus_per_node = 2.5", "run.gpus_per_node: expected a whole number"),
    ("[run]\nnnodes = 0", "run.nnodes: 0 is below the minimum 1"),
    ("[run]\noutput_dir = 5", "run.output_dir: expected a string"),
    ("[checks.clock-skew]\nwarn_ms = nan", "checks.clock-skew.warn_ms: expected a finite number"),
    ("[checks.clock-skew]\nwarn_ms = inf", "checks.clock-skew.warn_ms: expected a finite number"),
    ("[checks.clock-skew]\nwarn_ms = -5", "checks.clock-skew.warn_ms: -5.0 is below the minimum 0"),
    ("[checks.clock-skew]\nsamples = true", "checks.clock-skew.samples: expected a number"),
    ("[checks.gpu-perf]\nenabled = 1", "checks.gpu-perf.enabled: expected true/false"),
    ("[checks.clock-sync]\nunsynced_level = 3", "checks.clock-sync.unsynced_level: expected a string"),
    ("a = " + "[" * 5000 + "]" * 5000, "malformed TOML"),
])
def test_bad_config_values_name_file_and_key(tmp_path, text, needle):
    with pytest.raises(UsageError) as err:
        _resolve(tmp_path, text)
    assert needle in str(err.value) and "ddpdoctor.toml" in str(err.value)


def test_sound_config_values_resolve(tmp_path):
    run = _resolve(tmp_path, "[run]\ngpus_per_node = 8\nnnodes = 4\ntimeout = 30\n"
                             "[checks.clock-skew]\nwarn_ms = 50\nfail_ms = 500.5\n")
    assert run["gpus_per_node"] == 8 and run["nnodes"] == 4 and run["timeout"] == 30.0


def test_huge_config_is_refused_without_reading_it(tmp_path):
    cfg = tmp_path / "ddpdoctor.toml"
    with open(cfg, "wb") as fh:
        fh.truncate(1 << 30)
    with pytest.raises(UsageError, match="larger than 1 MiB"):
        settings.read_toml(str(cfg))


# -- the shared click type and the sizes ---------------------------------------------------------------

@pytest.mark.parametrize("value, ok", [("5", True), ("1", True), ("604800", True), ("nan", False), ("inf", False),
                                       ("-inf", False), ("0.5", False), ("1e300", False), ("soon", False)])
def test_timeout_type(value, ok):
    @click.command()
    @click.option("--timeout", type=TIMEOUT)
    def cmd(timeout):
        click.echo(repr(timeout))

    result = CliRunner().invoke(cmd, ["--timeout", value])
    assert (result.exit_code == 0) is ok, result.output


def test_finite_float_without_bounds():
    assert FiniteFloat().convert("-1e9", None, None) == -1e9
    with pytest.raises(click.BadParameter):
        FiniteFloat().convert("nan", None, None)


@pytest.mark.parametrize("text, needle", [("1T", "above the largest buffer"), ("9G", "above the largest buffer"),
                                          ("1e30", "above the largest buffer"), ("inf", "not a size"),
                                          ("nan", "not a size"), ("1e999", "not a size"), ("0", "positive")])
def test_sizes_are_bounded(text, needle):
    with pytest.raises(UsageError, match=needle):
        parse_size(text, "-b/--min-bytes")


def test_largest_size_is_accepted():
    assert parse_size("8G") == MAX_BUFFER_BYTES


# -- through the CLI (one line, exit 2, before any rank starts) --------------------------------------------

@pytest.mark.timeout(300)
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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "0"])
def test_preflight_timeout_is_finite_and_bounded(value):
    assert_usage_error(run_cli("preflight", "--timeout", value), "--timeout")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("text, needle", [("run = 5", "[run] table"), ('[run]\ntimeout = "soon"', "run.timeout"),
                                          ("[run]\ngpus_per_node = true", "run.gpus_per_node"),
                                          ("[checks.clock-skew]\nwarn_ms = nan", "warn_ms")])
def test_preflight_bad_config_exit_2(tmp_path, text, needle):
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text(text)
    assert_usage_error(run_cli("preflight", "--config", str(cfg)), "ddpdoctor.toml", needle)


@pytest.mark.timeout(120)
def test_preflight_set_nan_exit_2():
    assert_usage_error(run_cli("preflight", "--set", "clock-skew.warn_ms=nan"), "--set", "warn_ms", "finite")
