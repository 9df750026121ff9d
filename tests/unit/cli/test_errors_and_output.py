"""The CLI's one error policy: every user mistake is one red line and exit 2, --help and --version stay
torch-free, --json/--output write valid documents, config reaches compare. In-process (tests/unit/helpers.py
run_cli); a real process only for `python -m ddpdoctor` and what a fresh interpreter imports."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddpdoctor import documents
from ddpdoctor.cli import COMMANDS, run
from tests.unit.helpers import run_cli, run_process

LOCAL_CHEAP = "env-vars,resources,network,packages"


cli = run_cli  # in-process: these tests are about what the commands print and return, not the process


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


@pytest.mark.parametrize("args,needle", [
    (["preflight", "--no-such-flag"], "No such option"),
    (["preflight", "--only", "nosuch"], "nosuch"),
    (["preflight", "--skip", "nosuch"], "nosuch"),
    (["preflight", "--set", "resources"], "CHECK.KEY=VALUE"),
    (["preflight", "--nnodes", "0"], "nnodes"),
    (["preflight", "--config", "/nonexistent/ddpdoctor.toml"], "cannot read"),
    (["preflight", "--output", "/proc/version/sub"], "--output"),
    (["preflight", "--report", "/nonexistent-dir/r.html"], "--report"),
    (["preflight", "--token", "x"], "needs a cluster run"),
    (["nosuchcommand"], "No such command"),
])
def test_usage_errors_in_process(capsys, args, needle):
    assert run(args) == 2
    line = one_error_line(capsys.readouterr().err)
    assert needle in line


def test_malformed_config(tmp_path):
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text("[checks.resources]\nmin_nofile = 'lots'\n")
    p = cli("preflight", "--config", str(cfg))
    assert p.returncode == 2
    line = one_error_line(p.stderr)
    assert str(cfg) in line and "checks.resources.min_nofile" in line


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = cli("preflight", "--only", "env-vars", "--output", str(blocker / "out"))
    assert p.returncode == 2
    assert "--output" in one_error_line(p.stderr)


def test_verbose_shows_the_traceback(capsys):
    assert run(["-v", "preflight", "--only", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_version_and_module_entry():
    p = run_process("--version")  # `python -m ddpdoctor` itself
    assert p.returncode == 0 and "ddpdoctor" in p.stdout
    from ddpdoctor import __version__

    assert __version__ in p.stdout


def test_help_does_not_import_torch():
    code = ("import sys\nfrom ddpdoctor.cli import run\n"
            "for args in (['--help'], *[[c, '--help'] for c in sys.argv[1:]]):\n"
            "    assert run(args) == 0, args\n"
            "heavy = [m for m in ('torch', 'numpy', 'jinja2') if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    p = subprocess.run([sys.executable, "-c", code, *COMMANDS], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "HEAVY ['jinja2']" not in p.stdout and "torch" not in p.stdout.split("HEAVY")[1], p.stdout
    for name in COMMANDS:
        assert name in p.stdout


def test_checks_lists_every_check_with_source(capsys):
    assert run(["checks"]) == 0
    out = capsys.readouterr().out
    for name in ("torch-build", "packages", "env-vars", "gpu", "network", "resources", "clock-sync", "parity"):
        assert name in out
    assert "ddpdoctor" in out


def test_single_node_preflight_json_and_output(tmp_path):
    p = cli("preflight", "--only", LOCAL_CHEAP, "--json", "--output", str(tmp_path))
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads(p.stdout)
    documents.validate(doc)
    assert doc["kind"] == "preflight" and doc["scope"] == "node"
    assert p.returncode == doc["exit_code"]
    assert {r["check"] for r in doc["results"]} == set(LOCAL_CHEAP.split(","))
    for r in doc["results"]:
        assert r["level"] in ("pass", "warn", "fail", "skip") and r["nodes"] and r["summary"]
        if r["level"] in ("warn", "fail"):
            assert r["fix"], r
    (written,) = tmp_path.glob("node-*.json")
    assert documents.load(written)["results"] == doc["results"]
    assert doc["run"]["output_dir"] == str(tmp_path.resolve())


def test_set_reaches_compare_and_config_file_too(tmp_path):
    p = cli("preflight", "--only", "resources", "--json", "--set", "resources.min_nofile=100000000")
    doc = json.loads(p.stdout)
    assert any(r["level"] == "warn" and "open-files" in r["summary"] for r in doc["results"]), doc["results"]
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text("[checks.resources]\nfail_shm_mib = 100000000\nmin_shm_mib = 100000001\n")
    p = cli("preflight", "--only", "resources", "--json", "--config", str(cfg))
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and any("/dev/shm" in r["summary"] and r["level"] == "fail" for r in doc["results"])


def test_terminal_output_puts_failures_first_with_fix(tmp_path):
    p = cli("preflight", "--only", "resources,packages", "--set", "resources.fail_shm_mib=100000000",
            env={"COLUMNS": "200"})
    assert p.returncode == 1
    out = p.stdout
    assert "FAIL" in out and "fix:" in out and out.index("FAIL") < out.index("PASS")


def test_secrets_never_leave_the_process():
    p = cli("preflight", "--only", "env-vars", "--json",
            env={"NCCL_TEST_TOKEN": "tok-very-secret", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz",
                 "MASTER_ADDR": "https://me:pa55word@host"})
    assert "very-secret" not in p.stdout and "hf_abcdefghijklmnop" not in p.stdout and "pa55word" not in p.stdout
    assert "<redacted>" in p.stdout
