"""--prometheus-textfile read by a real node_exporter (Debian's prometheus-node-exporter, started by the test on a
loopback port with only the textfile collector): preflight and nccl-bench write one ddpdoctor.prom between them, and
/metrics serves their series with `node_textfile_scrape_error 0`. The documented lines are the ones
run here (tests/readme_blocks.py reads them): README's Prometheus lines, and UNATTENDED.md's node-problem-detector
rule run as NPD runs it."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.readme_blocks import npd_config, prometheus_lines

pytestmark = pytest.mark.skipif(shutil.which("prometheus-node-exporter") is None,
                                reason="needs Debian's prometheus-node-exporter")
DDPDOCTOR = [sys.executable, "-m", "ddpdoctor"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, proc: subprocess.Popen, limit: float = 20) -> str:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"node_exporter exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"node_exporter did not answer on 127.0.0.1:{port} within {limit:.0f} s")


README_DIR = "/var/lib/prometheus/node-exporter"


def readme_line(program: str, textfiles) -> list[str]:
    """README's line for ``program``, its textfile directory replaced by the test's."""
    line = next(argv for argv in prometheus_lines() if argv[0] == program and "--history" not in argv)
    return [arg.replace(README_DIR, str(textfiles)) for arg in line[1:]]


def npd_rule() -> tuple[dict, dict, float]:
    """UNATTENDED.md's custom-plugin config, checked as NPD validates it: the custom plugin, a rule's timeout within the
    global one, a permanent rule's condition among the default conditions."""
    config = npd_config()
    assert config["plugin"] == "custom"
    limit = float(config["pluginConfig"]["timeout"].rstrip("s"))
    (rule,) = config["rules"]
    assert float(rule["timeout"].rstrip("s")) <= limit
    assert rule["type"] == "permanent" and rule["condition"] in [c["type"] for c in config["conditions"]]
    assert rule["path"].endswith("/ddpdoctor")  # the console script; here this venv's, as python -m
    return config, rule, limit


@pytest.mark.timeout(180)
def test_node_exporter_serves_preflight_and_nccl_bench_series_and_npds_rule_runs(tmp_path):
    """Beside it (at the same time: two cores), README's node-problem-detector rule runs as NPD runs it: exit 0/1/2
    and one line of at most max_output_length characters on stdout, within the rule's timeout."""
    config, rule, limit = npd_rule()
    npd = subprocess.Popen([*DDPDOCTOR, *rule["args"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, DDPDOCTOR_NO_SAVE="1"))
    npd_started = time.monotonic()
    textfiles = tmp_path / "node-exporter"
    textfiles.mkdir()
    env = dict(os.environ, DDPDOCTOR_NO_SAVE="1", SLURM_JOB_ID="4242")  # hpc_job comes from the scheduler's job id
    # README's preflight line, on two cheap checks (no torch import) and with Nagios' exit codes
    pre = subprocess.run([*DDPDOCTOR, *readme_line("ddpdoctor", textfiles), "--only", "resources,env-vars",
                          "--exit-codes", "nagios"], capture_output=True, text=True, env=env, timeout=60)
    assert pre.returncode in (0, 1, 2), pre.stdout + pre.stderr  # a verdict, whatever this machine's shm
    assert pre.stdout.startswith("DDPDOCTOR ")
    bench = subprocess.run([*DDPDOCTOR, "nccl-bench", "-b", "4K", "-e", "8K", "-w", "1", "-n", "2",
                            "--prometheus-textfile", str(textfiles)], capture_output=True, text=True, env=env,
                           timeout=120)
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    assert sorted(p.name for p in textfiles.iterdir()) == [".ddpdoctor.prom.lock", "ddpdoctor.prom"]  # no temp file

    port = free_port()
    exporter = subprocess.Popen(["prometheus-node-exporter", *readme_line("prometheus-node-exporter", textfiles),
                                 f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                                 "--collector.textfile"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        metrics = scrape(port, exporter)
    finally:
        os.killpg(exporter.pid, signal.SIGTERM)
        exporter.wait(timeout=10)
    lines = metrics.splitlines()
    assert "node_textfile_scrape_error 0" in lines, [ln for ln in lines if "textfile" in ln]
    host = socket.gethostname()
    assert "# TYPE ddpdoctor_check_status gauge" in lines
    status = [ln for ln in lines if ln.startswith("ddpdoctor_check_status{")]
    assert any(f'Hostname="{host}"' in ln and 'check="env-vars"' in ln and 'hpc_job="4242"' in ln for ln in status)
    assert any('check="resources"' in ln and 'command="preflight"' in ln for ln in status), status
    busbw = [ln for ln in lines if ln.startswith("ddpdoctor_bus_bandwidth_gbs{")]
    assert any('collective="all_reduce"' in ln and 'message_size="4096"' in ln and 'command="nccl-bench"' in ln
               for ln in busbw), busbw
    stamps = [ln for ln in lines if ln.startswith("ddpdoctor_last_run_timestamp_seconds{")]
    assert len(stamps) == 2 and all(abs(float(ln.split()[-1]) - time.time()) < 600 for ln in stamps), stamps
    assert any(ln.startswith("node_textfile_mtime_seconds{") and "ddpdoctor.prom" in ln for ln in lines)
    out, err = npd.communicate(timeout=max(1.0, limit - (time.monotonic() - npd_started)))
    assert npd.returncode in (0, 1, 2) and "Traceback" not in err, out + err
    assert len(out.splitlines()) == 1 and len(out.rstrip("\n")) <= config["pluginConfig"]["max_output_length"], out


# ----------------------------------------------------------------------------------- the node check's alert rules
def alert_rules() -> dict[str, str]:
    """UNATTENDED.md's suggested rules: alert name -> expr."""
    import yaml

    doc = (Path(__file__).resolve().parents[2] / "ddpdoctor/unattended/UNATTENDED.md").read_text()
    block = next(b.split("\n", 1)[1] for b in doc.split("```")[1::2] if b.startswith("yaml\ngroups:"))
    return {r["alert"]: r["expr"] for g in yaml.safe_load(block)["groups"] for r in g["rules"]}


SELECTOR = re.compile(r'(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\}')


def series(metrics: str) -> dict[tuple, float]:
    """node_exporter's /metrics as {(name, ((label, value), ...)): value}, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(metrics) for s in f.samples}


def select(scrape: dict, selector: str) -> dict[tuple, float]:
    m = SELECTOR.fullmatch(selector.strip())
    name, wanted = (m["name"], dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))) if m else (selector.strip(), {})
    return {labels: v for (n, labels), v in scrape.items() if n == name and wanted.items() <= dict(labels).items()}


def evaluate(expr: str, scrape: dict, before: dict, now: float) -> dict[tuple, float]:
    """The forms the suggested rules use, evaluated as Prometheus would on one scrape (and the one before it, for
    increase): ``[time() -] max by (L) (SELECTOR) OP N`` and ``increase(NAME[range]) > N``; the series that fire."""
    ops = {"==": lambda a, b: a == b, ">": lambda a, b: a > b}
    lhs, op, rhs = re.fullmatch(r"(.+?)\s*(==|>)\s*([0-9.]+)", expr.strip()).groups()
    inc = re.fullmatch(r"increase\((\w+)\[\w+\]\)", lhs)
    if inc:
        values = {k: v - select(before, inc[1]).get(k, 0.0) for k, v in select(scrape, inc[1]).items()}
    else:
        elapsed = lhs.startswith("time() - ")
        agg = re.fullmatch(r"max by \(([^)]*)\) \((.+)\)", lhs.removeprefix("time() - "))
        keys = [k.strip() for k in agg[1].split(",")]
        values: dict[tuple, float] = {}
        for labels, v in select(scrape, agg[2]).items():
            group = tuple((k, dict(labels).get(k, "")) for k in keys)
            values[group] = max(values.get(group, v), v)
        if elapsed:
            values = {k: now - v for k, v in values.items()}
    return {k: v for k, v in values.items() if ops[op](v, float(rhs))}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_suggested_alert_rules_fire_on_a_failing_node_and_stay_quiet_on_a_healthy_one(tmp_path):
    textfiles = tmp_path / "node-exporter"
    textfiles.mkdir()
    scontrol = tmp_path / "scontrol"
    scontrol.write_text('#!/bin/sh\n[ "$1" = show ] && echo "NodeName=$4 State=IDLE Reason=(null)"\nexit 0\n')
    scontrol.chmod(0o755)
    site = tmp_path / "site.toml"
    healthy = (f'[node-check]\nresults_dir = "{tmp_path / "results"}"\nscontrol = "{scontrol}"\n'
               f'prometheus_textfile = "{textfiles}"\nonly = ["resources"]\n[checks.resources]\n'
               'min_free_disk_gib = 0.0\nmin_available_memory_gib = 0.0\n')
    check = [str(Path(sys.executable).parent / "ddpdoctor-slurm-check")]
    env = {"SLURMD_NODENAME": "n1", "DDPDOCTOR_CONFIG": str(site), "SLURM_JOB_ID": "77"}
    port = free_port()
    exporter = subprocess.Popen(["prometheus-node-exporter", f"--collector.textfile.directory={textfiles}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                                 "--collector.textfile"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    rules = alert_rules()
    try:
        site.write_text(healthy)
        env_hc = {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}  # a health check
        assert subprocess.run(check, env=env_hc, capture_output=True, timeout=60).returncode == 0
        first = series(scrape(port, exporter))
        assert not any("hpc_job" in dict(k[1]) for k in first)
        for name, expr in rules.items():
            assert evaluate(expr, first, first, time.time()) == {}, (name, expr)
        # the node breaks: a prolog (in a job: still no job label) drains it
        site.write_text(healthy + "min_shm_mib = 1000000000\nfail_shm_mib = 1000000000\n")
        p = subprocess.run(check, env=dict(env, SLURM_SCRIPT_CONTEXT="prolog_slurmd"), capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 1, p.stdout + p.stderr
        second = series(scrape(port, exporter))
    finally:
        os.killpg(exporter.pid, signal.SIGTERM)
        exporter.wait(timeout=10)
    host = socket.gethostname()
    assert not any("hpc_job" in dict(k[1]) for k in second)
    fired = {name: evaluate(expr, second, first, time.time()) for name, expr in rules.items()}
    assert fired["DdpdoctorNodeCheckFails"] == {(("Hostname", host), ("check", "resources")): 3.0}, fired
    assert list(fired["DdpdoctorNodeDrained"].values()) == [1.0], fired
    assert fired["DdpdoctorNodeCheckStale"] == {} and fired["DdpdoctorCheckSkippedForTime"] == {}, fired
    assert second[("node_textfile_scrape_error", ())] == 0
