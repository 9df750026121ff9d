"""The fork server of the simulated nodes (tests/zygote.py): a forked `python -m ddpdoctor` behaves as an
exec'd one (output, exit status, its own session, the environment and working directory it was given,
death by a signal), and nodes whose difference lies in interpreter start-up are exec'd."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import zygote
from tests.cluster_procs import alive

PY = [sys.executable, "-m", "ddpdoctor"]


def both(argv: list[str], env: dict, cwd: str):
    """(forked, exec'd): each run to its end as (exit status, stdout, stderr)."""
    out = []
    for forked in (True, False):
        proc = zygote.popen(argv, dict(env, **({} if forked else {"DDPDOCTOR_TEST_NO_FORK": "1"})), cwd)
        assert isinstance(proc, zygote.ForkedProc) is forked
        stdout, stderr = proc.stdout.read(), proc.stderr.read()
        out.append((proc.wait(60), stdout.decode(), stderr.decode()))
    return out


def test_which_nodes_are_forked():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    assert zygote.eligible([*PY, "preflight"], env)
    assert not zygote.eligible(["faketime", "+10s", *PY, "preflight"], env)
    assert not zygote.eligible(["/usr/bin/python3.9", "-m", "ddpdoctor"], env)
    for key, value in [("LD_PRELOAD", "/x.so"), ("PYTHONPATH", "/broken"), ("TORCH_CPP_LOG_LEVEL", "INFO"),
                       ("OMP_NUM_THREADS", "3"), ("DDPDOCTOR_TEST_NO_FORK", "1")]:
        assert not zygote.eligible([*PY, "preflight"], dict(env, **{key: value})), key


def test_a_forked_node_answers_as_an_execd_one(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", DDPDOCTOR_NO_SAVE="1", DDPDOCTOR_ZYGOTE_PROBE="here")
    usage = both([*PY, "preflight", "--nnodes", "x"], env, str(tmp_path))
    assert usage[0] == usage[1] and usage[0][0] == 2, usage
    run = both([*PY, "preflight", "--only", "launch-args,env-vars", "--json"], env, str(tmp_path))
    (rc_f, out_f, _), (rc_e, out_e, _) = run
    assert rc_f == rc_e == 0, run
    forked, execd = json.loads(out_f), json.loads(out_e)
    assert [r["check"] for r in forked["results"]] == [r["check"] for r in execd["results"]]
    assert [r["level"] for r in forked["results"]] == [r["level"] for r in execd["results"]]


@pytest.fixture
def server():
    s = zygote.Server()
    yield s
    s.close()


def test_a_forked_node_is_its_own_session_in_its_own_directory_and_dies_by_signal(tmp_path, server):
    # the server runs `-m MODULE`: here a module found through the working directory, as `python -m` finds it
    (tmp_path / "probe_mod.py").write_text(
        "import os,sys,time\nprint(os.getsid(0)==os.getpid(),os.getcwd(),os.environ['PROBE'],*sys.argv[1:],"
        "flush=True)\ntime.sleep(60)\n")
    node = server.spawn([sys.executable, "-m", "probe_mod", "a", "b"],
                        dict(os.environ, PYTHONUNBUFFERED="1", PROBE="p1"), str(tmp_path))
    assert node.stdout.readline().decode().split() == ["True", str(tmp_path), "p1", "a", "b"]
    assert node.poll() is None
    os.killpg(node.pid, signal.SIGKILL)
    assert node.wait(30) == -signal.SIGKILL


@pytest.mark.timeout(60)
def test_the_server_kills_what_it_started_when_the_test_process_goes(tmp_path):
    (tmp_path / "probe_mod.py").write_text("import time\ntime.sleep(120)\n")
    code = ("import os,sys;from tests import zygote;s=zygote.Server();"
            "p=s.spawn([sys.executable,'-m','probe_mod'],dict(os.environ,PYTHONUNBUFFERED='1'),sys.argv[1]);"
            "print(p.pid,flush=True);os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                         cwd=str(zygote.ROOT))
    pid = int(out.stdout.split()[0])
    for _ in range(100):  # bounded: 10 s
        if not alive([pid]):
            return
        time.sleep(0.1)
    os.killpg(pid, signal.SIGKILL)
    pytest.fail(f"node {pid} outlived its test process")
