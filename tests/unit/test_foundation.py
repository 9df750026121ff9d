"""The foundation's pure parts: levels and majority, options, the JSON model's load errors, config files
and --set, redaction, check selection."""
from __future__ import annotations

import json

import pytest

from ddpdoctor import settings, documents, redact, registry
from ddpdoctor.api import Level, Option, Result, majority
from ddpdoctor.errors import UsageError


def test_worst_level_and_verdict():
    assert Level.worst([Level.PASS, Level.SKIP, Level.WARN]) is Level.WARN
    assert Level.worst([]) is Level.PASS
    skip_only = [Result("a", Level.SKIP, "s")]
    assert documents.verdict_of(skip_only) is Level.PASS
    assert documents.exit_code_of(documents.verdict_of([Result("a", Level.FAIL, "f")])) == documents.EXIT_FAIL


def test_majority_names_the_odd_nodes():
    common, odd = majority({"a": "2.13", "b": "2.13", "c": "2.4"})
    assert common == "2.13" and odd == ["c"]
    assert majority({}) == (None, [])
    common, odd = majority({"a": [1], "b": [2]})  # a tie: deterministic
    assert common == [1] and odd == ["b"]


def test_option_conversion():
    assert Option(1.0, "").convert("2.5") == 2.5
    assert Option(True, "").convert("off") is False
    with pytest.raises(ValueError):
        Option(True, "").convert("maybe")
    with pytest.raises(ValueError):
        Option(1.0, "").convert(True)


def test_result_json_roundtrip():
    r = Result("x", Level.WARN, "sum", ["n1"], actual=1, expected=2, fix="do", details={"k": 1})
    assert Result.from_json(json.loads(json.dumps(r.to_json()))) == r


# ---------------------------------------------------------------- model
def test_dump_and_load_roundtrip(tmp_path):
    doc = documents.preflight_doc(scope="node", nodes={}, checks=[], results=[Result("a", Level.FAIL, "x")], run={})
    path = documents.dump(doc, tmp_path / "sub" / "a.json")
    loaded = documents.load(path)
    assert loaded["verdict"] == "fail" and loaded["exit_code"] == 1 and loaded["schema_version"] == 1
    assert not list(tmp_path.glob("sub/.*tmp"))


@pytest.mark.parametrize("content,needle", [
    ('{"schema": "ddpdoctor", "schema_version": 1, "kind": "preflight", "nodes"', "not valid JSON"),
    ('{"hello": 1}', "not a ddpdoctor result file"),
    ('{"schema": "ddpdoctor", "schema_version": 99, "kind": "preflight"}', "unsupported schema_version 99"),
    ('{"schema": "ddpdoctor", "schema_version": 1, "kind": "weather"}', "unknown kind"),
    ('{"schema": "ddpdoctor", "schema_version": 1, "kind": "preflight"}', "lacks"),
])
def test_load_errors_name_the_file(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        documents.load(path)
    assert needle in str(err.value) and str(path) in str(err.value)
    with pytest.raises(UsageError, match="cannot read"):
        documents.load(tmp_path / "missing.json")


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


# ---------------------------------------------------------------- registry
def test_builtins_register_through_entry_points():
    loaded = {lc.name: lc for lc in checks()}
    for name in ("torch-build", "packages", "env-vars", "gpu", "network", "resources", "clock-sync",
                 "mesh", "clock-skew", "names", "parity", "collective"):
        assert name in loaded, name
        assert loaded[name].source.startswith("ddpdoctor "), loaded[name].source
        assert loaded[name].check.description


def test_select_only_skip_and_unknown_names():
    loaded = checks()
    assert [lc.name for lc in registry.select(loaded, ["packages"], [])] == ["packages"]
    assert "packages" not in [lc.name for lc in registry.select(loaded, [], ["packages"])]
    with pytest.raises(UsageError, match="nosuch"):
        registry.select(loaded, ["nosuch"], [])
    with pytest.raises(UsageError, match="nosuch"):
        registry.select(loaded, [], ["nosuch"])


# ---------------------------------------------------------------- redaction
@pytest.mark.parametrize("name,value", [
    ("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz"),
    ("WANDB_API_KEY", "0123456789abcdef"),
    ("AWS_SECRET_ACCESS_KEY", "x"),
    ("DB_PASSWORD", "hunter2"),
    ("MY_CREDENTIALS", "x"),
    ("INNOCENT", "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"),
    ("INNOCENT2", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop"),
])
def test_secrets_are_redacted(name, value):
    assert redact.redact_env({name: value})[name] == redact.REDACTED


def test_ordinary_values_survive_and_url_passwords_go():
    env = {"NCCL_IB_PKEY": "0", "NCCL_DEBUG": "INFO", "PATHISH": "/usr/lib/x86_64-linux-gnu:/opt/cuda/lib64",
           "GIT_SHA": "a" * 40, "PROXY": "http://bob:s3cret@proxy:3128"}
    out = redact.redact_env(env)
    assert out["NCCL_IB_PKEY"] == "0" and out["NCCL_DEBUG"] == "INFO" and out["GIT_SHA"] == "a" * 40
    assert out["PATHISH"] == env["PATHISH"]
    assert "s3cret" not in out["PROXY"] and "bob" in out["PROXY"]
    assert redact.scrub({"nested": {"api_key": "v", "ok": ["https://u:p@h/"]}}) == \
        {"nested": {"api_key": redact.REDACTED, "ok": [f"https://u:{redact.REDACTED}@h/"]}}
