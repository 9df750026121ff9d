"""Unit tests of ddpdoctor/settings.py."""
from __future__ import annotations

import pytest

from ddpdoctor import registry, settings
from ddpdoctor.errors import UsageError
from tests.unit.helpers import assert_usage_error, run_cli


# ---------------------------------------------------------------- config
def checks():
    return registry.discover()


def test_config_file_and_set_flags_resolve(tmp_path):
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text('[run]\nnnodes = 4\n[checks.resources]\nmin_nofile = 100\nmin_shm_mib = 10\n')
    file_cfg = settings.read_toml(str(cfg))
    opts = settings.resolve_check_options(checks(), file_cfg, settings.parse_set(["resources.min_shm_mib=20"]), str(cfg))
    assert opts["resources"]["min_nofile"] == 100
    assert opts["resources"]["min_shm_mib"] == 20  # the flag wins over the file
    assert opts["resources"]["fail_shm_mib"] == 256  # the default where nobody said anything
    assert settings.resolve_run(file_cfg, {"timeout": 5.0}, str(cfg))["nnodes"] == 4


@pytest.mark.parametrize("text,needle", [
    ("[run\nnnodes=1", "malformed TOML"),
    ("[weather]\nx=1", "unknown table [weather]"),
    ("[run]\nspeed=1", "unknown key run.speed"),
    ("[run]\nnnodes=-1", "bad value for run.nnodes: -1 is below the minimum 1"),
    ("[checks.nosuch]\nx=1", "unknown check 'nosuch'"),
    ("[checks.resources]\nnope=1", "unknown option checks.resources.nope"),
    ("[checks.resources]\nmin_nofile='many'", "bad value for checks.resources.min_nofile"),
])
def test_malformed_config_names_file_and_key(tmp_path, text, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(UsageError) as err:
        file_cfg = settings.read_toml(str(cfg))
        settings.resolve_check_options(checks(), file_cfg, {}, str(cfg))
        settings.resolve_run(file_cfg, {}, str(cfg))
    assert needle in str(err.value) and "bad.toml" in str(err.value)


def test_bad_set_flags():
    with pytest.raises(UsageError, match="CHECK.KEY=VALUE"):
        settings.parse_set(["resources"])
    with pytest.raises(UsageError, match="unknown option"):
        settings.resolve_check_options(checks(), {}, settings.parse_set(["resources.nope=1"]), "")


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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("text, needle", [("run = 5", "[run] table"), ('[run]\ntimeout = "soon"', "run.timeout"),
                                          ("[run]\ngpus_per_node = true", "run.gpus_per_node"),
                                          ("[checks.clock-skew]\nwarn_ms = nan", "warn_ms")])
def test_preflight_bad_config_exit_2(tmp_path, text, needle):
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text(text)
    assert_usage_error(run_cli("preflight", "--config", str(cfg)), "ddpdoctor.toml", needle)
