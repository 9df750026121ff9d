"""Round 6 of the hostile local user (issue 47), part one: what a user can do to the root runs that write metrics and
read a site config: hold the textfile lock, plant links and FIFOs, own the config or the program it names. Run as
root with the real `nobody` (tests/as_nobody.py); each test fails on the code before the round."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ddpdoctor.errors import UsageError
from ddpdoctor.report import prometheus
from ddpdoctor.unattended import site
from tests.as_nobody import NOBODY, why_not
from tests.unit.helpers import run_cli

NOBODY_UID = 65534
PRE = {"kind": "preflight", "verdict": "pass", "created": "2026-11-28T10:00:00+00:00", "nodes": {"h": {}},
       "results": [{"check": "resources", "level": "pass", "summary": "ok", "nodes": ["h"]}]}
HOLD_LOCK = ("import fcntl, sys, time\nf = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_SH)\n"
             "print('held', flush=True)\ntime.sleep(120)\n")


def _need_nobody():
    why = why_not()
    if why:
        pytest.skip(why)


@pytest.fixture
def shared_dir():
    """A root-owned 0755 directory nobody can reach (pytest's tmp_path is 0700), as node_exporter's is."""
    folder = Path(tempfile.mkdtemp(prefix="ddpd-r6-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_nobody(code: str, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([*NOBODY, "/usr/bin/python3", "-c", code, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd="/")
    line = p.stdout.readline()
    if line.strip() != "held":
        p.kill()
        pytest.fail(f"nobody could not hold it: {line} {p.stderr.read()[-300:]}")
    return p


def _in_thread(fn, limit_s: float):
    """fn() in a thread: (finished within limit_s, its exception or None)."""
    box: dict = {}

    def work():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["exc"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(limit_s)
    return not t.is_alive(), box.get("exc")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_1_nobody_holding_the_metrics_lock_cannot_hang_a_root_run(shared_dir):
    """The lock of an earlier run (0644 before the fix) held by nobody through a read-only descriptor: the root
    write finishes at once, the lock it uses is 0600 and root's."""
    _need_nobody()
    samples = prometheus.samples(PRE, command="node-check", hostname="h")
    lock = shared_dir / prometheus.LOCK
    lock.write_text("")
    lock.chmod(0o644)  # what every run before round 6 left
    holder = _as_nobody(HOLD_LOCK, str(lock))
    try:
        done, exc = _in_thread(lambda: prometheus.write(shared_dir, samples, "node-check"), 20)
        assert done, "the root run blocked on the lock nobody holds"
        assert exc is None, exc
        st = os.lstat(lock)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
        assert "ddpdoctor_run_status" in (shared_dir / prometheus.FILE).read_text()
        assert stat.S_IMODE(os.stat(shared_dir / prometheus.FILE).st_mode) == 0o644  # node_exporter reads it
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.timeout(60)
def test_1_a_held_lock_is_waited_for_a_bounded_time_then_one_warning(tmp_path, monkeypatch):
    """Another root run that hangs holding the (private) lock: TimeoutError from the writer after LOCK_WAIT_S, and
    through a command one warning line with the verdict's exit code."""
    import fcntl

    from ddpdoctor.report import textfile

    monkeypatch.setattr(textfile, "LOCK_WAIT_S", 0.5)
    with textfile.Folder(tmp_path) as folder:
        fd = folder._own_lock(prometheus.LOCK)
    try:
        fcntl.flock(os.open(tmp_path / prometheus.LOCK, os.O_RDONLY), fcntl.LOCK_EX)  # held until the test ends
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="held by another process"):
            with textfile.Folder(tmp_path) as folder, folder.locked(prometheus.LOCK, wait_s=0.5):
                pass
        assert time.monotonic() - t0 < 10
        p = run_cli("preflight", "--only", "env-vars", "--no-save", "-q", "--prometheus-textfile", str(tmp_path))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "not written" in p.stderr and "held by another process" in p.stderr and "verdict stands" in p.stderr
    finally:
        os.close(fd)


# --- 2. the site config and the program it names ------------------------------------------------------------------

def _nobody_sh(script: str) -> None:
    subprocess.run([*NOBODY, "/bin/sh", "-c", script], check=True, cwd="/", timeout=30)


def _site(folder: Path, scontrol: Path, results: Path) -> str:
    return (f'[node-check]\nresults_dir = "{results}"\nscontrol = "{scontrol}"\nonly = ["env-vars"]\n')


def _marker_script(path: Path, marker: Path) -> None:
    path.write_text(f"#!/bin/sh\nid -u > {marker}\necho 'NodeName=n1 State=IDLE Reason=(null)'\n")
    path.chmod(0o755)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", ["0666", "owned-by-nobody", "link-to-nobodys", "in-0777-dir", "nobodys-scontrol"])
def test_2_root_never_runs_what_a_users_config_names(shared_dir, shape):
    """The config (or the scontrol it names) is another user's to change: one line, no scontrol run as root."""
    _need_nobody()
    marker, results = shared_dir / "ran-as", shared_dir / "results"
    script = shared_dir / "scontrol"
    _marker_script(script, marker)
    cfg = shared_dir / "ddpdoctor.toml"
    body = _site(shared_dir, script, results)
    if shape == "0666":
        cfg.write_text(body)
        cfg.chmod(0o666)
    elif shape == "owned-by-nobody":
        cfg.write_text(body)
        os.chown(cfg, NOBODY_UID, NOBODY_UID)
    elif shape == "link-to-nobodys":
        users = shared_dir / "users"
        users.mkdir()
        os.chown(users, NOBODY_UID, NOBODY_UID)
        _nobody_sh(f"printf '%s' '{body}' > {users}/mine.toml")
        cfg.symlink_to(users / "mine.toml")
    elif shape == "in-0777-dir":
        open_dir = shared_dir / "open"
        open_dir.mkdir()
        open_dir.chmod(0o777)
        cfg = open_dir / "ddpdoctor.toml"
        cfg.write_text(body)
    else:  # the config is root's, the program it names nobody's
        users = shared_dir / "users"
        users.mkdir()
        os.chown(users, NOBODY_UID, NOBODY_UID)
        _nobody_sh(f"printf '#!/bin/sh\\nid -u > {marker}\\n' > {users}/scontrol && chmod 755 {users}/scontrol")
        cfg.write_text(_site(shared_dir, users / "scontrol", results))
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"})
    assert not marker.exists(), f"root ran the user's program ({marker.read_text()!r})"
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "trusts only what root owns" in lines[0], p.stderr


def test_2_a_config_root_owns_with_its_program_still_runs(tmp_path):
    marker, results = tmp_path / "ran-as", tmp_path / "results"
    script = tmp_path / "scontrol"
    _marker_script(script, marker)
    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text(_site(tmp_path, script, results))
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"})
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert marker.read_text().strip() == str(os.geteuid())


def test_2_under_slurm_a_refused_config_exits_0(tmp_path, monkeypatch, capsys):
    """The console script under SLURM: the job is not failed for the site's mistake."""
    from ddpdoctor.cli import node_check_cmd

    cfg = tmp_path / "ddpdoctor.toml"
    cfg.write_text("[node-check]\n")
    cfg.chmod(0o666)
    monkeypatch.setattr("sys.argv", ["ddpdoctor-slurm-check"])
    monkeypatch.setattr(node_check_cmd, "STARTED", None)  # main() sets the process's start: the next in-process
    # node check in this worker would count its budget from then and skip every check
    monkeypatch.setattr("signal.signal", lambda *a: None)

    def exit_here(code):
        raise SystemExit(code)

    monkeypatch.setattr("ddpdoctor.cli._exit", exit_here)
    for key, value in {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1",
                       "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "5"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as ended:
        node_check_cmd.main()
    assert ended.value.code == 0
    assert "writable by others" in capsys.readouterr().err


# --- 3. an unread state, a reason that only looks like ours -----------------------------------------------------

@pytest.fixture
def busy_slurm(tmp_path):
    """A stand-in scontrol: `show` answers from show.sh (exit code included), `update` is recorded."""
    show, calls = tmp_path / "show.sh", tmp_path / "calls.txt"
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then . {show}; exit 0; fi\nprintf '%s|' \"$@\" >> {calls}\n")
    script.chmod(0o755)
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{tmp_path / "results"}"\nscontrol = "{script}"\n'
                   'only = ["resources"]\n[checks.resources]\nmin_free_disk_gib = 0.0\n'
                   'min_available_memory_gib = 0.0\nmin_nofile = 0\n')
    calls.write_text("")
    return cfg, show, calls


TIMED_OUT = "echo 'slurm_load_node error: Socket timed out on send/recv operation' >&2; exit 1\n"
FAILING = "fail_shm_mib = 1000000000\nmin_shm_mib = 1000000000\n"


def test_3_an_unread_state_neither_drains_nor_resumes(busy_slurm):
    cfg, show, calls = busy_slurm
    show.write_text(TIMED_OUT)
    base = {"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"}
    cfg.write_text(cfg.read_text() + FAILING)
    p = run_cli("node-check", env={**base, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "9"})
    assert p.returncode == 1, p.stdout + p.stderr  # the job still does not start on a failing node
    assert "could not be read" in p.stdout and "Socket timed out" in p.stdout
    # the admin's "RMA: bad DIMM" drain was not overwritten: no node update; the failing prolog still writes its
    # job's comment and requeues the job (issue 46), which touches the job, not the node
    assert "NodeName=" not in calls.read_text(), calls.read_text()
    calls.write_text("")
    cfg.write_text(cfg.read_text().replace(FAILING, ""))
    p = run_cli("node-check", env=base)
    assert p.returncode == 0 and calls.read_text() == "", p.stdout  # and a passing run resumes nothing


def test_3_a_reason_with_leading_spaces_is_an_admins(busy_slurm):
    cfg, show, calls = busy_slurm
    show.write_text("echo 'NodeName=n1 State=IDLE+DRAIN Reason=  ddpdoctor: resources: shm [admin@x]'\n")
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"})
    assert p.returncode == 0 and "drained by someone else" in p.stdout, p.stdout + p.stderr
    assert calls.read_text() == ""


# --- 4. links in results_dir -------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(120)
def test_4_pruning_never_follows_a_users_link_to_roots_files(shared_dir, busy_slurm):
    """results_dir writable by nobody, who makes the node's folder a link to a root-only folder of *.json files:
    root's files stay, the record is refused with one warning, the verdict stands."""
    _need_nobody()
    cfg, show, calls = busy_slurm
    show.write_text("echo 'NodeName=n1 State=IDLE Reason=(null)'\n")
    precious = shared_dir / "root-only"
    precious.mkdir(mode=0o700)
    for i in range(20):
        (precious / f"2020010{i:02d}-x.json").write_text("{}")
    results = shared_dir / "results"
    results.mkdir()
    os.chown(results, NOBODY_UID, NOBODY_UID)
    _nobody_sh(f"ln -s {precious} {results}/n1")
    cfg.write_text(cfg.read_text().replace(str(cfg.parent / "results"), str(results)).replace(
        "[node-check]\n", "[node-check]\nkeep = 2\n"))
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg), "SLURMD_NODENAME": "n1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(list(precious.iterdir())) == 20
    assert "record not kept" in p.stderr and "owned by nobody" in p.stderr


def test_4_a_linked_node_folder_is_not_pruned_through(tmp_path):
    from ddpdoctor.unattended import node_check as nc

    precious = tmp_path / "precious"
    precious.mkdir()
    for i in range(20):
        (precious / f"2020010{i:02d}-x.json").write_text("{}")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "n1").symlink_to(precious)
    with pytest.raises(UsageError, match="a link is never followed"):  # round 7: not written through it either
        nc.keep({"schema": "ddpdoctor"}, tmp_path / "results" / "n1" / "20990101-x.json", keep_n=2)
    assert not (precious / "20990101-x.json").exists()
    assert all((precious / f"2020010{i:02d}-x.json").exists() for i in range(20))


# --- 4. links and FIFOs in the textfile directory ----------------------------------------------------------------

def test_4_a_linked_lock_a_fifo_and_a_linked_metrics_file_are_never_followed(tmp_path):
    """Planted in the directory: the lock a link to a file elsewhere, ddpdoctor.prom a link to a root-only metrics
    file with a secret label (then a FIFO): nothing is created through the link, nothing blocks, the secret is not
    republished."""
    elsewhere, secret = tmp_path / "elsewhere", tmp_path / "root-only.prom"
    elsewhere.mkdir()
    secret.write_text('ddpdoctor_run_status{Hostname="h",command="nccl-bench",token="s3cret"} 0.0\n')
    secret.chmod(0o600)
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    (textdir / prometheus.LOCK).symlink_to(elsewhere / "created-through-the-link")
    (textdir / prometheus.FILE).symlink_to(secret)
    samples = prometheus.samples(PRE, command="preflight", hostname="h")
    prometheus.write(textdir, samples, "preflight")
    assert not (elsewhere / "created-through-the-link").exists()
    text = (textdir / prometheus.FILE).read_text()
    assert "s3cret" not in text and 'command="preflight"' in text
    assert not (textdir / prometheus.FILE).is_symlink() and "s3cret" in secret.read_text()
    (textdir / prometheus.FILE).unlink()
    os.mkfifo(textdir / prometheus.FILE)
    done, exc = _in_thread(lambda: prometheus.write(textdir, samples, "preflight"), 20)
    assert done and exc is None, exc
    assert stat.S_ISREG(os.lstat(textdir / prometheus.FILE).st_mode)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_4_as_root_a_textfile_dir_nobody_can_write_is_refused(shared_dir):
    """nobody's directory: --prometheus-textfile is a usage error before the work; from the site config, one
    warning and the verdict stands."""
    _need_nobody()
    textdir = shared_dir / "textfile"
    textdir.mkdir()
    os.chown(textdir, NOBODY_UID, NOBODY_UID)
    p = run_cli("preflight", "--only", "env-vars", "--no-save", "-q", "--prometheus-textfile", str(textdir))
    assert p.returncode == 2 and "owned by nobody" in p.stderr, p.stdout + p.stderr
    cfg = shared_dir / "site.toml"
    cfg.write_text(f'[node-check]\nresults_dir = "{shared_dir / "results"}"\nonly = ["env-vars"]\n'
                   f'prometheus_textfile = "{textdir}"\n')
    p = run_cli("node-check", env={"DDPDOCTOR_CONFIG": str(cfg)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not written" in p.stderr and "owned by nobody" in p.stderr and "verdict stands" in p.stderr
    assert list(textdir.iterdir()) == []
