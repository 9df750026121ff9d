"""run-trainer with real torchrun-launched processes on gloo: training, snapshots and checksums, and every
failure mode explained (exception, restart and resume, SIGKILL, hang, a user script), bad input."""
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

from ddpdoctor.cluster.local import free_port
from ddpdoctor.cluster.local import kill_sessions
from tests.cluster_procs import alive

FAST = ["--n-layer", "1", "--n-embd", "32", "--batch-size", "4", "--block-size", "32", "--log-every", "5"]


def run_bounded(argv: list[str], timeout: float, env=None) -> subprocess.CompletedProcess:
    """Like subprocess.run, but a timeout kills the whole session (torchrun and its workers), not just the child."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout} s: {err[-2000:]}") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_trainer(*args, run_dir: Path, timeout=200, env=None):
    argv = [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir", str(run_dir), "--json",
            *args]
    p = run_bounded(argv, timeout, env)
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else None
    return p, doc


def metrics(run_dir: Path, rank: int = 0) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()]


def records(run_dir: Path, doc: dict) -> Path:
    """A run's own directory: <run-dir>/<run id>/."""
    return run_dir / doc["run_id"]


def _assert_one_node_two_procs_trained(doc: dict, run: Path, steps: int) -> None:
    """A healthy one-node run of 2 ranks: the loss falls, the ranks' checksums agree, the snapshot, run.json,
    the metrics of both ranks and torch's own per-rank and agent logs are kept."""
    assert doc["kind"] == "run-trainer" and doc["verdict"] == "pass" and doc["restarts"] == 0
    s = doc["metrics_summary"]
    assert s["steps"] == steps and s["ranks"] == 2 and s["final_loss"] < s["first_loss"] * 0.8
    assert doc["checksums_equal"] is True and doc["start"] == {"fresh": True}
    assert (run / "snapshots" / "latest.pt").exists() and (run / "run.json").exists()
    assert set(doc["metrics"]) == {"0", "1"} and doc["metrics"]["1"][-1]["step"] == steps
    logs = Path(doc["logs"])
    assert list(logs.glob("*/attempt_0/0/stdout.log")) and list(logs.glob("*/attempt_0/1/stderr.log"))


def _assert_rank_1s_exception_is_the_root_cause(doc: dict, step: int) -> None:
    """The reference trainer's injected exception on rank 1: the root cause with its message and file:line,
    rank 0 a victim with a reason, and the run's own records (logs, flight-recorder dumps) all read."""
    assert doc["verdict"] == "fail"
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["category"] == "exception" and rc["error_type"] == "InjectedFailure"
    faults = Path(__file__).parents[2] / "reference_trainer" / "faults.py"
    raise_line = 1 + faults.read_text().splitlines().index('        raise InjectedFailure(f"injected failure at step {step} on rank {rank}")')
    assert f"step {step} on rank 1" in rc["message"] and rc["location"].endswith(f"faults.py:{raise_line}"), rc
    assert [c["rank"] for c in doc["consequences"]] == [0]
    assert doc["consequences"][0]["victim"] is True and doc["consequences"][0]["reason"]
    # the run's own records (logs, flight-recorder dumps written at exit) are read, none skipped as "outside"
    assert not [n for n in doc["input_notes"] if "outside" in n], doc["input_notes"]


def two_nodes(run_dir: Path, *trainer_args: str, preflight: tuple[str, ...] = ("--no-preflight",),
              nproc: int = 2) -> list[tuple[int, str, str]]:
    """Two simulated nodes, each a run-trainer on its own loopback address (node 0 on the master's, as on a
    real cluster where the master is node 0), one shared run dir: [(code, stdout, stderr)] in node order."""
    port = free_port()
    procs = []
    for node in range(2):
        argv = [sys.executable, "-m", "ddpdoctor", "run-trainer", *preflight, "--nnodes", "2",
                "--nproc-per-node", str(nproc), "--master", f"127.0.0.1:{port}", "--local-addr", f"127.0.0.{node + 1}",
                "--run-dir", str(run_dir), "--json", "--", *trainer_args, *FAST]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    try:
        outs = [p.communicate(timeout=250) for p in procs]
    finally:
        kill_sessions(procs)
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


@pytest.mark.timeout(300)
def test_restart_resumes_from_the_snapshot_without_repeating_steps(tmp_path):
    p, doc = run_trainer("--nproc-per-node", "2", "--max-restarts", "1", "--", "--steps", "30", "--snapshot-every",
                         "10", "--fail-at-step", "15", "--fail-rank", "1", *FAST, run_dir=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert doc["verdict"] == "pass" and doc["restarts"] == 1
    assert doc["attempts"][0]["root_cause"]["error_type"] == "InjectedFailure"
    rows = metrics(records(tmp_path, doc))
    first = [r["step"] for r in rows if r["attempt"] == 0]
    second = [r["step"] for r in rows if r["attempt"] == 1]
    assert first[:10] == list(range(1, 11))
    assert second == list(range(11, 31))  # resumed at the snapshot (step 10): nothing before it again, nothing lost
    assert doc["checksums_equal"] is True


@pytest.mark.timeout(240)
def test_sigkill_is_classified_as_signal_9(tmp_path):
    p, doc = run_trainer("--nproc-per-node", "2", "--", "--steps", "30", "--fail-at-step", "4", "--fail-rank", "1",
                         "--fail-mode", "sigkill", *FAST, run_dir=tmp_path)
    assert p.returncode == 1
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["signal"] == "SIGKILL" and rc["exit_code"] == -9 and "OOM" in rc["fix"]


@pytest.mark.timeout(240)
def test_hang_is_named_with_stacks_in_bounded_time(tmp_path):
    start = time.monotonic()
    p, doc = run_trainer("--nproc-per-node", "2", "--hang-timeout", "6", "--", "--steps", "200", "--fail-at-step",
                         "5", "--fail-rank", "1", "--fail-mode", "hang", *FAST, run_dir=tmp_path)
    elapsed = time.monotonic() - start
    assert p.returncode == 1, p.stderr[-2000:]
    rc = doc["root_cause"]
    assert rc["category"] == "hang" and rc["rank"] == 1, rc
    assert "faults.py" in rc["location"]
    stacks = doc["hang"]["stacks"]
    assert "hang_forever" in stacks["1"] and "hang_forever" not in stacks["0"]
    # --hang-timeout 6 + the watchdog's 10 s to stop (README); 74 s: run-trainer, torchrun and 2 ranks importing
    # torch and reaching step 5, and the post-mortem, on a loaded 2-core box
    assert elapsed < 6 + 10 + 74


@pytest.mark.timeout(240)
def test_user_script_that_raises(tmp_path):
    script = tmp_path / "my_train.py"
    script.write_text(textwrap.dedent("""
        import os
        import torch.distributed as dist

        def load_batch(rank):
            if rank == 1:
                raise ValueError("batch 7 has shape (3, 5), expected (3, 4)")
            return 1

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        load_batch(rank)
        dist.barrier()
    """))
    p, doc = run_trainer("--nproc-per-node", "2", "--", str(script), run_dir=tmp_path / "run")
    assert p.returncode == 1
    rc = doc["root_cause"]
    assert rc["rank"] == 1 and rc["error_type"] == "ValueError" and "expected (3, 4)" in rc["message"]
    assert rc["location"] == f"{script}:7"


@pytest.mark.timeout(240)
def test_user_module_that_raises(tmp_path):
    """`-- -m package.module`, as `torchrun -m` would run it (sys.path[0] is the working directory)."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(textwrap.dedent("""
        import sys
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            raise ValueError(f"bad config {sys.argv[1:]} in {__name__}")
        dist.barrier()
    """))
    argv = [sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node", "2", "--run-dir",
            str(tmp_path / "run"), "--json", "--", "-m", "mypkg.train", "--lr", "3"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=200)
    finally:
        kill_sessions([proc])
    rc = json.loads(out)["root_cause"]
    assert rc["rank"] == 1 and rc["error_type"] == "ValueError", err[-2000:]
    assert rc["message"] == "bad config ['--lr', '3'] in __main__" and rc["location"] == f"{pkg / 'train.py'}:7"


@pytest.mark.timeout(240)
def test_preflight_gate_force_launches(tmp_path):
    """A failing preflight with --force: the job runs and the document says so (the same gate without --force
    launches nothing: the blocked run of test_the_preflight_it_ran_is_kept_beside_run_json_and_reported_with_it)."""
    base = [sys.executable, "-m", "ddpdoctor", "run-trainer", "--run-dir", str(tmp_path), "--preflight-args",
            "--only resources --set resources.fail_shm_mib=100000000"]
    p = run_bounded([*base, "--force", "--json", "--", "--steps", "3", *FAST], 200)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["config"]["preflight"] == "forced" and doc["preflight"]["verdict"] == "fail"


@pytest.mark.timeout(300)
def test_failure_on_another_node_is_named_on_both_nodes(tmp_path):
    res = two_nodes(tmp_path, "--steps", "30", "--fail-at-step", "4", "--fail-rank", "3")
    assert [code for code, _, _ in res] == [1, 1]
    docs = [json.loads(out) for _, out, _ in res]
    for doc in docs:
        rc = doc["root_cause"]
        assert rc["rank"] == 3 and rc["error_type"] == "InjectedFailure", rc


def _wait_for_step(run_dir: Path, step: int, limit: float = 90.0) -> None:
    """Until rank 0's metrics (in the trainer's run dir, or in any run under run-trainer's) reach ``step``."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        for path in (*run_dir.glob("metrics/rank0.jsonl"), *run_dir.glob("*/metrics/rank0.jsonl")):
            if len(path.read_text().splitlines()) >= step:
                return
        time.sleep(0.2)
    raise AssertionError(f"rank 0 never reached step {step}")


@pytest.mark.timeout(180)
def test_sigterm_saves_a_snapshot_and_exits_cleanly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor_trainer.train", "--run-dir", str(tmp_path), "--steps",
                             "100000", "--snapshot-every", "100000", *FAST], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_step(tmp_path, 5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_sessions([proc])
    assert proc.returncode == 0, err[-2000:]
    assert "SIGTERM: snapshot saved" in out
    import torch

    state = torch.load(tmp_path / "snapshots" / "latest.pt", weights_only=True)  # data only, no pickled code
    assert state["step"] >= 5 and set(state) >= {"model", "optimizer", "scheduler", "rng"}


@pytest.mark.timeout(180)
def test_ctrl_c_leaves_no_process_behind(tmp_path):
    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node",
                             "2", "--run-dir", str(tmp_path), "--", "--steps", "100000", *FAST],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_step(tmp_path, 3)
        family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(family) >= 4  # ddpdoctor, torchrun, two workers
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        _, err = proc.communicate(timeout=90)
        assert proc.returncode != 0
        time.sleep(1.0)
        alive = [p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert not alive, (alive, err[-1500:])
    finally:
        kill_sessions([proc])


@pytest.mark.timeout(300)
def test_two_nodes_pass_the_cluster_preflight_then_train(tmp_path):
    """Two simulated nodes of two processes each: the cluster preflight passes on both, then they train as one
    job of 4 ranks (one two-node run serves both, where two ran: the preflight's and the 2 x 2 training's)."""
    res = two_nodes(tmp_path, "--steps", "20", preflight=(), nproc=2)
    for code, _, err in res:
        assert code == 0, err[-3000:]
    for _, out, _ in res:
        doc = json.loads(out)
        assert doc["config"]["preflight"] == "ran" and doc["preflight"]["verdict"] in ("pass", "warn")
        assert doc["verdict"] == "pass"
    doc = json.loads(res[0][1])
    assert doc["checksums_equal"] is True
    assert sorted(doc["metrics"]) == ["0", "1", "2", "3"]
    assert doc["metrics_summary"]["final_loss"] < doc["metrics_summary"]["first_loss"]


@pytest.mark.timeout(300)
def test_two_nodes_do_not_launch_when_the_cluster_preflight_fails(tmp_path):
    gate = ("--preflight-args", "--only resources,launch-args --set resources.fail_shm_mib=100000000")
    res = two_nodes(tmp_path, "--steps", "10", preflight=gate, nproc=1)
    for code, _, err in res:
        assert code == 1 and "not launching" in err, err[-2000:]
    assert not list(tmp_path.glob("*/metrics"))


# ---------------------------------------------------------------- runs stay separate (issue 12)
@pytest.mark.timeout(400)
def test_a_new_invocation_never_resumes_or_reports_an_earlier_run(tmp_path):
    """The issue's sequence: a failed run with a snapshot at step 10, then a new run in the same --run-dir
    (fresh: its own steps and nothing of the first run's), then an explicit --resume of the first one.
    The failed run is also the exception test (rank 1's exception is the root cause, rank 0 its victim) and
    the fresh run the one-node training test (2 ranks, 40 steps: the loss falls, checksums, torch's logs):
    one run-trainer each instead of two."""
    failed_p, failed = run_trainer("--nproc-per-node", "2", "--", "--steps", "30", "--snapshot-every", "10",
                                   "--fail-at-step", "15", "--fail-rank", "1", *FAST, run_dir=tmp_path)
    assert failed_p.returncode == 1 and (records(tmp_path, failed) / "snapshots" / "latest.pt").exists()
    _assert_rank_1s_exception_is_the_root_cause(failed, step=15)
    debris = records(tmp_path, failed) / "snapshots" / ".latest.pt.tmp999999999"  # a crashed writer's, long ago
    debris.write_bytes(b"partial")
    os.utime(debris, (time.time() - 3600, time.time() - 3600))

    p, fresh = run_trainer("--nproc-per-node", "2", "--", "--steps", "40", *FAST, run_dir=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert fresh["run_id"] != failed["run_id"] and fresh["start"] == {"fresh": True}
    assert fresh["metrics_summary"]["steps"] == 40 and fresh["restarts"] == 0
    assert [r["step"] for r in metrics(records(tmp_path, fresh))] == list(range(1, 41))
    assert not debris.exists()
    _assert_one_node_two_procs_trained(fresh, records(tmp_path, fresh), steps=40)

    p, resumed = run_trainer("--nproc-per-node", "2", "--resume", failed["run_id"], "--", "--steps", "14", *FAST,
                             run_dir=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert resumed["start"]["fresh"] is False and resumed["start"]["from_run"] == failed["run_id"]
    assert resumed["start"]["step"] == 10
    assert [r["step"] for r in metrics(records(tmp_path, resumed))] == list(range(11, 15))
    human = run_bounded([sys.executable, "-m", "ddpdoctor", "report", str(records(tmp_path, resumed) / "run.json"),
                         "-o", str(tmp_path / "report.html")], 60)
    assert human.returncode in (0, 1, 2)  # the report command is another module's; run.json must stay loadable

    again = run_bounded([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--run-dir",
                         str(tmp_path), "--rdzv-id", fresh["run_id"], "--", "--steps", "3"], 60)
    assert again.returncode == 2 and "already has records" in again.stderr


def _family(pid: int) -> list[int]:
    import psutil

    return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]


USER_LOOP = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
while True:
    dist.all_reduce(t)
"""


@pytest.mark.timeout(200)
@pytest.mark.parametrize("sig,user_script", [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGTERM, True),
                                            (signal.SIGHUP, False)])  # SIGHUP: a dropped ssh session (issue 33)
def test_signal_to_run_trainer_stops_every_process_and_still_writes_run_json(tmp_path, sig, user_script):
    """A signal to run-trainer alone (a scheduler's SIGTERM, `kill -INT`): torchrun and every worker end, nothing
    is left listening, and the post-mortem and run.json still happen."""
    run_dir = tmp_path / "run"
    if user_script:
        script = tmp_path / "loop.py"
        script.write_text(USER_LOOP)
        job = ["--", str(script)]
    else:
        job = ["--", "--steps", "100000", *FAST]
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node",
                             "2", "--run-dir", str(run_dir), "--json", *job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if user_script:
            end = time.monotonic() + 90
            while time.monotonic() < end and len(_family(proc.pid)) < 4:
                time.sleep(0.3)
            time.sleep(3)  # the workers are in their all_reduce loop
        else:
            _wait_for_step(run_dir, 3)
        family = _family(proc.pid)
        assert len(family) >= 4, family  # ddpdoctor, torchrun, two workers
        proc.send_signal(sig)  # to run-trainer only
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 128 + sig, err[-3000:]
        time.sleep(0.5)
        assert not alive(family), err[-2000:]
        doc = json.loads(out)
        assert doc["interrupted"] == sig.name and doc["verdict"] == "fail"
        assert doc["root_cause"]["category"] == "interrupted", doc["root_cause"]
        assert json.loads((run_dir / doc["run_id"] / "run.json").read_text())["interrupted"] == sig.name
        assert not list(run_dir.glob("**/*.tmp*"))
    finally:
        kill_sessions([proc])


CHECKPOINT_ON_USR1 = """
import os, signal, time, torch, torch.distributed as dist
asked = []
signal.signal(signal.SIGUSR1, lambda s, f: asked.append(s))  # as Lightning's SLURM requeue handler does
dist.init_process_group("gloo")
open(os.path.join(os.environ["READY_DIR"], "ready%d" % dist.get_rank()), "w").close()
for _ in range(24):
    dist.all_reduce(torch.ones(4)); time.sleep(0.5)
print("rank %d: %d checkpoint request(s)" % (dist.get_rank(), len(asked)), flush=True)
"""


@pytest.mark.timeout(200)
@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2])
def test_a_schedulers_checkpoint_signal_to_the_whole_step_stops_nothing(tmp_path, sig):
    """SLURM's --signal=USR1@90 (or scancel --signal=USR2) reaches every process of the step: run-trainer, torchrun
    and each rank. Before: run-trainer and torchrun had no handler and died of it, the ranks with them (SIGKILL, no
    run.json); now both go on, each rank's own handler runs as under plain torchrun (the agent's ignoring is not
    inherited: the bootstrap restores the default), and the job passes."""
    script = tmp_path / "job.py"
    ready = tmp_path / "ready"
    ready.mkdir()
    script.write_text(CHECKPOINT_ON_USR1 if sig == signal.SIGUSR1 else CHECKPOINT_ON_USR1.replace(
        "signal.signal(signal.SIGUSR1, lambda s, f: asked.append(s))", "signal.signal(signal.SIGUSR2, lambda s, f: "
        "asked.append(s))"))
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node",
                             "2", "--run-dir", str(tmp_path / "run"), "--json", "--", str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, READY_DIR=str(ready)))
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end and not ((ready / "ready0").exists() and (ready / "ready1").exists()):
            time.sleep(0.2)
        family = _family(proc.pid)
        assert len(family) >= 4, family  # ddpdoctor, torchrun, two workers
        for pid in family:  # as slurmstepd signals the step: every process of it
            os.kill(pid, sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        doc = json.loads(out)
        assert doc["verdict"] == "pass" and doc["outcome"]["state"] == "pass", doc.get("root_cause")
        assert f"ddpdoctor: {sig.name} received" in err and "not a stop" in err, err[-2000:]
        assert "rank 0: 1 checkpoint request(s)" in err and "rank 1: 1 checkpoint request(s)" in err, err[-2000:]
    finally:
        kill_sessions([proc])


@pytest.mark.timeout(120)
def test_sigkill_of_run_trainer_leaves_no_rank_behind(tmp_path):
    """run-trainer SIGKILLed (no clean-up of its own runs): torchrun dies with it (PDEATHSIG) and every rank dies
    with torchrun (the bootstrap's PDEATHSIG), instead of ranks blocked in a collective forever."""
    import psutil

    script = tmp_path / "loop.py"
    script.write_text("import time, torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "for _ in range(3000):\n    dist.all_reduce(torch.ones(4)); time.sleep(0.1)\n")
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "run-trainer", "--no-preflight", "--nproc-per-node",
                             "2", "--run-dir", str(tmp_path / "run"), "--", str(script)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        ranks: list = []
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [c for c in psutil.Process(proc.pid).children(recursive=True)
                     if "ddpdoctor.launch.bootstrap" in " ".join(c.cmdline())]
            time.sleep(0.5)
        assert len(ranks) >= 2, "the ranks never started"  # the two ranks (and torchrun, whose argv names the bootstrap)
        tree = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(tree, timeout=15)
        assert not alive, [(p.pid, _status(p)) for p in alive]  # a zombie has no cmdline to show
    finally:
        kill_sessions([proc])


def _status(p) -> str:
    import psutil

    try:
        return f"{p.status()} {' '.join(p.cmdline())[:200]}"
    except psutil.Error as exc:  # a zombie or gone
        return type(exc).__name__


@pytest.mark.timeout(300)
def test_the_preflight_it_ran_is_kept_beside_run_json_and_reported_with_it(tmp_path):
    """run-trainer's own preflight is a result too: kept in the run's directory under the run's id, so
    `ddpdoctor report` alone shows the preflight and the run as one workflow (it showed run.json only)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DDPDOCTOR_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID")}

    def ddpdoctor(*args):
        return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=240, start_new_session=True)

    p = ddpdoctor("run-trainer", "--nproc-per-node", "2", "--preflight-args", "--only env-vars,resources",
                  "--", "--steps", "3", *FAST)
    assert p.returncode == 0, p.stderr[-2000:]
    (run,) = [d for d in (tmp_path / "ddpdoctor-results").iterdir() if not d.name.startswith(".")]  # .data: the corpus
    (node_file,) = run.glob("node-*.json")
    pre = json.loads(node_file.read_text())
    assert pre["kind"] == "preflight" and pre["run_id"] == json.loads((run / "run.json").read_text())["run_id"]
    # still the last word: run.json, then the logs, one path a line
    assert p.stdout.rstrip().splitlines()[-2].startswith("run.json: ") and p.stdout.rstrip().splitlines()[-1].startswith("logs: ")
    p = ddpdoctor("report")
    assert p.returncode == 0, p.stderr
    assert f"the last run in ddpdoctor-results: {run.name}: preflight, run-trainer (read {node_file.name}, run.json)" \
        in " ".join(p.stdout.split()) and "different runs" not in p.stdout + p.stderr
    # A gate that stops the launch keeps its preflight too (and launches nothing)
    p = ddpdoctor("run-trainer", "--rdzv-id", "blocked-1", "--preflight-args",
                  "--only resources --set resources.fail_shm_mib=100000000", "--", "--steps", "3")
    assert p.returncode == 1 and "not launching" in p.stderr
    blocked = tmp_path / "ddpdoctor-results" / "blocked-1"
    assert [f.name for f in blocked.iterdir()] == [node_file.name]  # its preflight, and no metrics: nothing ran
    assert json.loads((blocked / node_file.name).read_text())["verdict"] == "fail"
