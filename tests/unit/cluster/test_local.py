"""Unit tests of ddpdoctor/cluster/local.py's helpers (the --local-nodes cluster itself is an integration test):
ports, addresses, the child interpreter that runs this very ddpdoctor, and killing what is left."""
from __future__ import annotations

import socket
import subprocess
import sys

from ddpdoctor.cluster import local


def test_free_port_is_bindable_and_node_addresses_are_distinct_loopbacks():
    port = local.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free at the time it was asked for
    assert [local.node_addr(i) for i in range(3)] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def test_child_python_runs_this_ddpdoctor_even_from_a_dir_holding_a_fake_one(tmp_path):
    fake = tmp_path / "ddpdoctor"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the fake ddpdoctor was imported')\n")
    argv = local.child_python()
    assert argv[0] == sys.executable and argv[1] == "-c"
    out = subprocess.run([*argv, "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ddpdoctor" in out.stdout and "fake" not in out.stderr, out.stderr


def test_kill_sessions_ends_whole_sessions_and_skips_the_finished():
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    done.wait(30)
    # a node with a child of its own, in its own session: both go
    node = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                             "print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert node.stdout.readline().strip() == "up"
    import psutil

    kids = psutil.Process(node.pid).children(recursive=True)
    local.kill_sessions([done, node], wait_s=10)
    assert node.returncode == -15 and done.returncode == 0  # SIGTERM first: a node removes its key file
    gone, alive = psutil.wait_procs(kids, timeout=10)
    assert not alive, alive
    node.stdout.close()


def test_kill_sessions_kills_a_session_that_ignores_sigterm_after_the_grace():
    node = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert node.stdout.readline().strip() == "up"
    local.kill_sessions([node], wait_s=10, grace_s=0.5)
    assert node.returncode == -9
    node.stdout.close()


def test_free_port_is_below_the_ephemeral_range_and_bindable(tmp_path):
    """Outgoing connections take ephemeral ports: a port drawn below that range cannot be taken by one between the
    draw and the master's listen (seen: EADDRINUSE with two test files running at once)."""
    import socket

    from ddpdoctor.cluster.local import _ephemeral_low, free_port

    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports) and len(ports) > 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))
    bad = tmp_path / "range"
    bad.write_text("junk")
    assert _ephemeral_low(str(bad)) == 32768 and _ephemeral_low(str(tmp_path / "none")) == 32768
    bad.write_text("40000\t60999\n")
    assert _ephemeral_low(str(bad)) == 40000
