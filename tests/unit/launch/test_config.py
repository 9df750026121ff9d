"""Unit tests for run-trainer's launch config and torchrun command line: validation, identical rendezvous, env."""
from __future__ import annotations

import pytest

from ddpdoctor.errors import UsageError
from ddpdoctor.launch import torchrun
from ddpdoctor.launch.config import TrainerConfig, validate


def test_rendezvous_args_identical_on_every_node(tmp_path):
    nodes = [validate(TrainerConfig(nnodes=2, nproc_per_node=2, master="127.0.0.1:29511", run_dir=str(tmp_path),
                                    local_addr=f"127.0.0.{i + 2}")) for i in range(2)]
    def rdzv(cfg):
        a = torchrun.argv(cfg, tmp_path / "logs")
        return [a[a.index(flag) + 1] for flag in ("--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--nnodes")]
    assert rdzv(nodes[0]) == rdzv(nodes[1]) == ["c10d", "127.0.0.1:29511", nodes[0].rendezvous_id(), "2"]


def test_argv_uses_torch_launcher_with_per_rank_logs(tmp_path):
    cfg = validate(TrainerConfig(nproc_per_node=2, run_dir=str(tmp_path)))
    a = torchrun.argv(cfg, tmp_path / "logs")
    assert a[1:3] == ["-m", "torch.distributed.run"]
    assert a[a.index("--log-dir") + 1] == str(tmp_path / "logs") and "--redirects" in a and "--tee" in a
    assert cfg.endpoint().startswith("127.0.0.1:") and not cfg.endpoint().endswith(":0")
    assert "ddpdoctor_trainer.train" in a


@pytest.mark.parametrize("kw, fragment", [
    (dict(nnodes=2), "--master"),
    (dict(master="nohost"), "HOST:PORT"),
    (dict(master="h:99999"), "HOST:PORT"),
    (dict(script="/nonexistent/train.py"), "no such file"),
    (dict(hang_timeout=0), "--hang-timeout"),
])
def test_bad_config_is_one_line_usage_error(tmp_path, kw, fragment):
    with pytest.raises(UsageError) as err:
        validate(TrainerConfig(run_dir=str(tmp_path), **kw))
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_environment_omp_flight_recorder_and_user_env_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9")
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    cfg = validate(TrainerConfig(nproc_per_node=2, run_dir=str(tmp_path),
                                 env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}))
    cpu = torchrun.environment(cfg, cuda=False)
    assert cpu["OMP_NUM_THREADS"] == str(cfg.omp_threads) and int(cpu["OMP_NUM_THREADS"]) >= 1
    assert cpu["GLOO_SOCKET_IFNAME"] == "eth9" and cpu["NCCL_SOCKET_IFNAME"] == "lo"
    assert cpu["TORCH_FR_BUFFER_SIZE"] == torchrun.FR_ENTRIES  # every backend's recorder, gloo's too
    gpu = torchrun.environment(cfg, cuda=True)
    assert gpu["TORCH_FR_BUFFER_SIZE"] == torchrun.NCCL_FR_ENTRIES and gpu["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


# ---------------------------------------------------------------- one run id per invocation (issue 12)
@pytest.fixture
def no_scheduler(monkeypatch):
    for var in ("SLURM_JOB_ID", "PBS_JOBID"):
        monkeypatch.delenv(var, raising=False)


def test_each_invocation_gets_its_own_run_id_and_directory(tmp_path, no_scheduler):
    a, b = (validate(TrainerConfig(run_dir=str(tmp_path))) for _ in range(2))
    assert a.run_id != b.run_id and a.records() == tmp_path / a.run_id
    assert torchrun.argv(a, tmp_path)[torchrun.argv(a, tmp_path).index("--rdzv-id") + 1] == a.run_id
    assert str(a.records()) in torchrun.argv(a, tmp_path) and torchrun.log_dir(a).parent == a.records() / "logs"


def test_scheduler_job_id_is_the_default_and_identical_on_every_node(tmp_path, monkeypatch, no_scheduler):
    monkeypatch.setenv("PBS_JOBID", "4242.pbs-server")
    nodes = [validate(TrainerConfig(nnodes=2, master="127.0.0.1:29511", run_dir=str(tmp_path))) for _ in range(2)]
    assert nodes[0].run_id == nodes[1].run_id == "4242.pbs-server"
    monkeypatch.setenv("SLURM_JOB_ID", "77/x")
    assert validate(TrainerConfig(run_dir=str(tmp_path))).run_id == "77-x"


@pytest.mark.parametrize("bad", ["a/../b c", "..", "-x", "a" * 65, "", "x y", "é"])
def test_bad_run_id_is_a_usage_error(tmp_path, bad):
    with pytest.raises(UsageError, match="--rdzv-id"):
        validate(TrainerConfig(run_dir=str(tmp_path), run_id=bad or " "))


def test_an_earlier_invocations_records_are_refused_not_continued(tmp_path, no_scheduler):
    (tmp_path / "r1" / "metrics").mkdir(parents=True)
    with pytest.raises(UsageError, match="already has records.*--resume r1"):
        validate(TrainerConfig(run_dir=str(tmp_path), run_id="r1"))
    (tmp_path / "r3" / "flight_recorder").mkdir(parents=True)  # a user script's run, killed before run.json
    with pytest.raises(UsageError, match="already has records"):
        validate(TrainerConfig(run_dir=str(tmp_path), run_id="r3"))
    (tmp_path / "r2" / "logs").mkdir(parents=True)  # another node of this same run got here first: fine
    assert validate(TrainerConfig(run_dir=str(tmp_path), run_id="r2")).run_id == "r2"


def test_resume_is_explicit_and_names_the_snapshot(tmp_path, no_scheduler):
    import os
    import time

    with pytest.raises(UsageError, match="no earlier run"):
        validate(TrainerConfig(run_dir=str(tmp_path), resume="latest"))
    for name, age in (("old", 100), ("new", 10)):
        snap = tmp_path / name / "snapshots" / "latest.pt"
        snap.parent.mkdir(parents=True)
        snap.write_bytes(b"x")
        os.utime(snap, (time.time() - age, time.time() - age))
    cfg = validate(TrainerConfig(run_dir=str(tmp_path), resume="latest"))
    assert cfg.resume_from == str(tmp_path / "new" / "snapshots" / "latest.pt") and cfg.run_id not in ("old", "new")
    argv = torchrun.argv(cfg, tmp_path)
    assert argv[argv.index("--resume-from") + 1] == cfg.resume_from
    assert validate(TrainerConfig(run_dir=str(tmp_path), resume="old")).resume_from.endswith("old/snapshots/latest.pt")
    for resume, needle in (("nope", "no snapshot"), ("a/b", "--resume"), ("x", "own run id")):
        with pytest.raises(UsageError, match=needle):
            validate(TrainerConfig(run_dir=str(tmp_path), resume=resume, run_id="x" if resume == "x" else None))
    script = tmp_path / "t.py"
    script.write_text("")
    with pytest.raises(UsageError, match="reference trainer"):
        validate(TrainerConfig(run_dir=str(tmp_path), resume="old", script=str(script)))


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 0.0, 1e9])
def test_hang_timeout_must_be_finite_and_bounded(tmp_path, value):
    with pytest.raises(UsageError, match="--hang-timeout"):
        validate(TrainerConfig(run_dir=str(tmp_path), hang_timeout=value))


def test_stale_temp_files_are_removed_live_ones_kept(tmp_path):
    import os
    import subprocess
    import sys
    import time

    from ddpdoctor.launch import records

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    snaps = tmp_path / "r1" / "snapshots"
    snaps.mkdir(parents=True)
    (tmp_path / ".data").mkdir()
    stale = [snaps / f".latest.pt.tmp{dead_pid}", tmp_path / ".data" / f"corpus.tmp{dead_pid}"]
    live = snaps / f".latest.pt.tmp{os.getppid()}"  # a running writer's
    recent = snaps / f".other.pt.tmp{dead_pid}"  # maybe another node's writer, still being written
    for p in (*stale, live, recent):
        p.write_bytes(b"partial")
    old = time.time() - 600
    for p in (*stale, live):
        os.utime(p, (old, old))
    keep = tmp_path / "r1" / "snapshots" / "latest.pt"
    keep.write_bytes(b"whole")
    assert sorted(records.clean_temps(tmp_path)) == sorted(stale)
    assert live.exists() and recent.exists() and keep.exists()
    assert records.clean_temps(tmp_path, stale_s=0, run="r2") == []  # another run's: not this one's to judge
    assert records.clean_temps(tmp_path, stale_s=0, run="r1") == [recent]  # its job is over: no writer is left


def test_user_module_runs_under_the_bootstrap_as_python_dash_m(tmp_path):
    cfg = validate(TrainerConfig(run_dir=str(tmp_path), module="pkg.train", script_args=["--lr", "1"]))
    argv = torchrun.argv(cfg, tmp_path)
    i = argv.index("ddpdoctor.launch.bootstrap")
    assert argv[i - 1] == "-m" and argv[i + 1:] == ["-m", "pkg.train", "--lr", "1"] and not cfg.is_reference
    with pytest.raises(UsageError, match="module name"):
        validate(TrainerConfig(run_dir=str(tmp_path), module="pkg/train.py"))
