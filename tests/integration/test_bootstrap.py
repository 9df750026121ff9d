"""The worker bootstrap around an unmodified script, in real processes: it behaves as plain `python script.py`
(argv, __main__, sys.path[0], exit codes, signals) and adds the error file, stacks on SIGUSR1 and the worker
server that answers while the script's main thread is blocked."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    mode = sys.argv[1]
    print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0], "file": __file__}), flush=True)

    def load_batch():
        raise ValueError("batch 7 has shape (3, 5)")

    if mode == "raise":
        load_batch()
    if mode == "exit":
        sys.exit(3)
    if mode == "sleep":
        print("ready", flush=True)
        time.sleep(60)
""")


def bootstrap(tmp_path: Path, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ddpdoctor.launch.bootstrap", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, **kw)


def plain(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)


@pytest.fixture
def script(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "train.py"
    path.write_text(SCRIPT)
    return path


def test_script_sees_what_plain_python_gives_it(tmp_path, script):
    ours = bootstrap(tmp_path, "sub/train.py", "ok", "--lr", "3e-4").communicate(timeout=60)[0]
    theirs = plain(tmp_path, "sub/train.py", "ok", "--lr", "3e-4").stdout
    assert json.loads(ours) == json.loads(theirs)
    assert json.loads(ours)["argv"] == ["sub/train.py", "ok", "--lr", "3e-4"] and json.loads(ours)["name"] == "__main__"


def test_module_mode_as_python_dash_m(tmp_path, script):
    (tmp_path / "sub" / "__init__.py").write_text("")
    ours = bootstrap(tmp_path, "-m", "sub.train", "ok").communicate(timeout=60)[0]
    theirs = plain(tmp_path, "-m", "sub.train", "ok").stdout
    assert json.loads(ours) == json.loads(theirs)


def test_exit_codes_are_the_scripts(tmp_path, script):
    p = bootstrap(tmp_path, str(script), "exit")
    p.communicate(timeout=60)
    assert p.returncode == 3
    p = bootstrap(tmp_path, str(script), "ok")
    p.communicate(timeout=60)
    assert p.returncode == 0
    p = bootstrap(tmp_path, "missing.py")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and "can't open file" in err


def test_uncaught_exception_writes_torchs_error_file_and_the_plain_traceback(tmp_path, script):
    err_file = tmp_path / "error.json"
    p = bootstrap(tmp_path, str(script), "raise", env={"TORCHELASTIC_ERROR_FILE": str(err_file)})
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert err.strip().splitlines()[-1] == "ValueError: batch 7 has shape (3, 5)"
    assert "bootstrap.py" not in err and "runpy" not in err  # the traceback plain python prints
    data = json.loads(err_file.read_text())["message"]
    assert data["message"] == "ValueError: batch 7 has shape (3, 5)"
    assert f'File "{script}", line 7, in load_batch' in data["extraInfo"]["py_callstack"]
    assert int(data["extraInfo"]["timestamp"]) > 0


@pytest.mark.timeout(90)
def test_sigusr1_dumps_stacks_and_the_worker_server_answers_while_blocked(tmp_path, script):
    from ddpdoctor.forensics.evidence import worker_client

    sock = tmp_path / "w{rank}.sock"
    env = {"DDPDOCTOR_STACKS_DIR": str(tmp_path / "stacks"), "DDPDOCTOR_WORKER_SOCKET": str(sock), "RANK": "3"}
    p = bootstrap(tmp_path, str(script), "sleep", env=env)
    try:
        assert "ready" in p.stdout.readline() + p.stdout.readline()
        path = str(sock).replace("{rank}", "3")
        end = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < end:
            time.sleep(0.1)
        stacks = worker_client.ask(path, "dump_traceback")
        assert stacks and "in <module>" in stacks and str(script) in stacks
        p.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        assert p.poll() is None  # the signal did not end the script
        dumped = (tmp_path / "stacks" / "rank3.txt").read_text()
        assert f'File "{script}", line 15 in <module>' in dumped
    finally:
        p.kill()
        p.communicate(timeout=30)



def test_the_launchers_sigterm_leaves_where_the_rank_was_and_still_ends_it(tmp_path, script):
    """torchrun stops the other ranks with SIGTERM once one failed: the rank's stacks at that moment go to
    stacks/sigterm/rank<R>.txt (a rank stopped before it raised leaves no traceback), and it ends of SIGTERM."""
    from ddpdoctor.forensics.live.collectives import main_thread_frames, user_site

    env = {"DDPDOCTOR_STACKS_DIR": str(tmp_path / "stacks"), "DDPDOCTOR_FR_DIR": str(tmp_path / "fr"), "RANK": "3"}
    p = bootstrap(tmp_path, str(script), "sleep", env=env)
    try:
        assert "ready" in p.stdout.readline() + p.stdout.readline()
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == -signal.SIGTERM
        dumped = (tmp_path / "stacks" / "sigterm" / "rank3.txt").read_text()
        # the script's own frame, never the bootstrap's handler: line 15 (time.sleep), or 14 when the signal
        # lands as `print("ready")` returns
        assert user_site(main_thread_frames(dumped)) in [{"where": f"{script}:{line}", "function": "<module>"}
                                                         for line in (14, 15)], dumped
    finally:
        p.kill()
        p.communicate(timeout=30)


SLOW_ERROR_FILE = """
import time
from torch.distributed.elastic.multiprocessing import errors

def slow(self, e):  # torch's handler, slowed: it opens the file "w", then writes
    path = self._get_error_file_path()
    with open(path, "w") as fh:
        open(path + ".opened", "w").close()
        time.sleep(1.5)  # within the grace the SIGTERM gives it
        fh.write('{"message": {"message": "ValueError: late", "extraInfo": {"timestamp": "1"}}}')

errors.ErrorHandler.record_exception = slow
"""


def test_a_sigterm_while_the_error_file_is_written_never_leaves_it_half_written(tmp_path, script):
    """torchrun stops the other ranks with SIGTERM once one failed; a rank writing its own error file at that
    moment left it empty, and torchrun's agent died reading it (JSONDecodeError, no failure table). The file
    appears whole (the rank gets a few seconds to finish it) or not at all."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_ERROR_FILE)
    error = tmp_path / "error.json"
    env = {"DDPDOCTOR_STACKS_DIR": str(tmp_path / "stacks"), "DDPDOCTOR_FR_DIR": str(tmp_path / "fr"), "RANK": "0",
           "TORCHELASTIC_ERROR_FILE": str(error), "PYTHONPATH": f"{hook}:{os.environ.get('PYTHONPATH', '')}"}
    p = bootstrap(tmp_path, str(script), "raise", env=env)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("*.opened")):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        assert not error.exists() or error.stat().st_size > 0  # torch writes beside it, never in place
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        assert json.loads(error.read_text())["message"]["message"] == "ValueError: late"  # it landed, whole
        assert not (tmp_path / "error.json.partial").exists() and not (tmp_path / "error.json.tmp").exists()
    finally:
        p.kill()
        p.communicate(timeout=30)


EXITING = textwrap.dedent("""
    import os, sys, time
    import torch._C._distributed_c10d  # noqa: F401 - a torch job's process, its worker server up
    open(sys.argv[1], "w").close()
    time.sleep(0.3)
""")


@pytest.mark.timeout(150)
def test_a_stack_request_while_the_rank_exits_never_keeps_it_from_exiting(tmp_path):
    """torch's `dump_traceback` handler takes the GIL on the server's thread, and the server's shutdown() joins
    that thread while holding the GIL: a request in flight when the script's exit stops the server left a healthy
    rank blocked at exit forever (2 of 8 here, hammered as below). Ranks exit while a client asks for their stacks
    without a pause; each must end, with its own exit code, within the bound."""
    import threading

    from ddpdoctor.forensics.evidence import worker_client

    (tmp_path / "exiting.py").write_text(EXITING)

    def one(i: int) -> tuple[int | None, float]:
        sock, ready = tmp_path / f"w{i}.sock", tmp_path / f"ready{i}"
        proc = bootstrap(tmp_path, "exiting.py", str(ready), env={"DDPDOCTOR_WORKER_SOCKET": str(sock)})
        stop = threading.Event()

        def hammer() -> None:
            while not stop.is_set() and proc.poll() is None:
                if ready.exists():
                    worker_client.ask(sock, "dump_traceback", timeout=1.0)
                else:
                    time.sleep(0.01)

        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        try:
            proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None, time.monotonic() - t0
        finally:
            stop.set()
        return proc.returncode, time.monotonic() - t0

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(8)))
    assert all(code == 0 for code, _ in results), results


FORKING = textwrap.dedent("""
    import os, sys, time
    import torch._C._distributed_c10d  # noqa: F401
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a helper process forked by the script, ending as a script does (atexit runs)
    os.waitpid(child, 0)
    open(sys.argv[1], "w").close()
    time.sleep(60)
""")


@pytest.mark.timeout(90)
def test_a_forked_child_ending_leaves_the_ranks_server_and_record_alone(tmp_path):
    """A child forked by the script that ends through the interpreter runs the bootstrap's exit handlers too: the
    rank's worker server must still answer after it (its socket not removed, nothing joined in the child), and
    the child writes no record at exit in the rank's name (the watchdog would take the rank as ending)."""
    from ddpdoctor.forensics.evidence import worker_client

    (tmp_path / "forking.py").write_text(FORKING)
    sock, ready, fr_dir = tmp_path / "w.sock", tmp_path / "ready", tmp_path / "fr"
    proc = bootstrap(tmp_path, "forking.py", str(ready),
                     env={"DDPDOCTOR_WORKER_SOCKET": str(sock), "DDPDOCTOR_FR_DIR": str(fr_dir), "RANK": "0"})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), proc.communicate(timeout=10)
        assert sock.exists() and worker_client.ask(sock, "dump_traceback", timeout=10.0) is not None
        assert not (fr_dir / "rank0.json").exists()
    finally:
        proc.kill()
        proc.communicate()


STOPPING = textwrap.dedent("""
    import os, sys, time
    from ddpdoctor.launch import server_stop

    class Server:  # stands for torch's: shutdown() blocked (as by a stack request holding out for the GIL)
        def shutdown(self):
            time.sleep(float(sys.argv[2]))

    path = sys.argv[1]
    open(path, "w").close()
    server_stop.SERVER_STOP_LIMIT_S = 1
    server_stop.stop_worker_server(Server(), path, os.stat(path).st_ino, os.getpid())
    print("stopped", os.path.exists(path), flush=True)
""")


@pytest.mark.timeout(60)
def test_a_server_stop_that_blocks_ends_the_rank_instead_of_hanging_it(tmp_path):
    """Past the drain, a stop still blocked (a request that connected before the socket went) is bounded:
    faulthandler's thread ends the rank with exit 1 and the stacks on stderr; a stop that returns changes nothing."""
    (tmp_path / "stopping.py").write_text(STOPPING)
    ok = plain(tmp_path, "stopping.py", str(tmp_path / "a.sock"), "0")
    assert ok.returncode == 0 and ok.stdout.strip() == "stopped False", ok.stderr  # its socket path removed
    t0 = time.monotonic()
    stuck = plain(tmp_path, "stopping.py", str(tmp_path / "b.sock"), "30")
    assert stuck.returncode == 1 and "Timeout (0:00:01)!" in stuck.stderr and "stopped" not in stuck.stdout
    assert time.monotonic() - t0 < 20
