"""--prometheus-textfile read by a real node_exporter (Debian's prometheus-node-exporter, started by the test on a
loopback port with only the textfile collector): preflight and nccl-bench write one ddpdoctor.prom between them, and
/metrics serves their series with `node_textfile_scrape_error 0`. README's "Run it unattended" lines are the ones
run here (tests/readme_blocks.py reads them): the Prometheus lines, and the node-problem-detector rule run as NPD
runs it."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

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
    """README's custom-plugin config, checked as NPD validates it: the custom plugin, a rule's timeout within the
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
