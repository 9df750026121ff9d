"""Unit tests of run-trainer's small pieces: ddpdoctor/launch/torchrun.py (the torchrun command line and the
workers' environment), records.py (temp files of gone writers, how a run started) and gate.py (the
interfaces the preflight found, handed to the job)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from ddpdoctor.launch import gate, records, torchrun
from ddpdoctor.report import console_trainer
from ddpdoctor.launch.config import REFERENCE_MODULE, TrainerConfig


def opt(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- torchrun.py ----------------------------------------------------------------------------------------
def test_argv_runs_a_script_through_the_bootstrap_with_per_rank_logs(tmp_path):
    cfg = TrainerConfig(nnodes=2, nproc_per_node=4, master="10.0.0.1:29500", run_dir=str(tmp_path), run_id="job-7",
                        script="train.py", script_args=["--lr", "3e-4"], max_restarts=1, local_addr="10.0.0.2")
    argv = torchrun.argv(cfg, tmp_path / "logs")
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert (opt(argv, "--nnodes"), opt(argv, "--nproc-per-node"), opt(argv, "--rdzv-backend")) == ("2", "4", "c10d")
    assert (opt(argv, "--rdzv-endpoint"), opt(argv, "--rdzv-id")) == ("10.0.0.1:29500", "job-7")
    assert (opt(argv, "--max-restarts"), opt(argv, "--local-addr")) == ("1", "10.0.0.2")
    assert (opt(argv, "--log-dir"), opt(argv, "--redirects"), opt(argv, "--tee")) == (str(tmp_path / "logs"), "3", "3")
    # the bootstrap comes first, then the user's script and its arguments exactly as given
    assert argv[argv.index(torchrun.BOOTSTRAP) - 1] == "-m"
    assert argv[argv.index(torchrun.BOOTSTRAP) + 1:] == ["train.py", "--lr", "3e-4"]


def test_argv_for_a_module_and_for_the_reference_trainer(tmp_path):
    mod = torchrun.argv(TrainerConfig(run_dir=str(tmp_path), run_id="r", module="pkg.train", script_args=["-x"]),
                        tmp_path)
    assert mod[mod.index(torchrun.BOOTSTRAP) + 1:] == ["-m", "pkg.train", "-x"]
    assert "--local-addr" not in mod
    ref_cfg = TrainerConfig(run_dir=str(tmp_path), run_id="r", resume_from="snap.pt", script_args=["--steps", "5"])
    ref = torchrun.argv(ref_cfg, tmp_path)
    tail = ref[ref.index(torchrun.BOOTSTRAP) + 1:]
    assert tail[:2] == ["-m", REFERENCE_MODULE]
    assert opt(tail, "--run-dir") == str(ref_cfg.records()) and opt(tail, "--data-dir") == str(ref_cfg.data_dir())
    assert opt(tail, "--resume-from") == "snap.pt" and tail[-2:] == ["--steps", "5"]


def test_environment_turns_forensics_on_and_lets_the_users_settings_win(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "50")  # the user's own choice stays
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    cfg = TrainerConfig(run_dir=str(tmp_path), run_id="r", omp_threads=3,
                        env={"NCCL_SOCKET_IFNAME": "eth1", "TORCH_CPP_LOG_LEVEL": "INFO"})
    env = torchrun.environment(cfg, cuda=False, label="n0")
    records_dir = str(cfg.records().resolve())
    assert env["TORCH_FR_BUFFER_SIZE"] == "50"
    assert env["DDPDOCTOR_STACKS_DIR"] == f"{records_dir}/stacks"
    assert env["DDPDOCTOR_FR_DIR"] == f"{records_dir}/flight_recorder"
    assert env["DDPDOCTOR_WORKER_SOCKET"].endswith("/{rank}.sock") and len(env["DDPDOCTOR_WORKER_SOCKET"]) < 100
    assert (env["OMP_NUM_THREADS"], env["PYTHONUNBUFFERED"], env["PYTHONFAULTHANDLER"]) == ("3", "1", "1")
    assert env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env  # NCCL's recorder only with CUDA
    cuda = torchrun.environment(cfg, cuda=True, label="n0")
    assert cuda["TORCH_FR_BUFFER_SIZE"] == "50" and cuda["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert cuda["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"].startswith(records_dir)


def test_one_buffer_size_under_the_name_torch_reads_first(tmp_path, monkeypatch):
    """torch reads TORCH_FR_BUFFER_SIZE before TORCH_NCCL_TRACE_BUFFER_SIZE for every backend: a CUDA node's 2,000
    must be set under the first name (it was under the second, behind a CPU-sized first, and never used)."""
    for name in torchrun.FR_BUFFER_VARS:
        monkeypatch.delenv(name, raising=False)
    cfg = TrainerConfig(run_dir=str(tmp_path), run_id="r")
    assert torchrun.environment(cfg, cuda=True, label="n0")["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert torchrun.environment(cfg, cuda=False, label="n0")["TORCH_FR_BUFFER_SIZE"] == torchrun.FR_ENTRIES
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in torchrun.environment(cfg, cuda=True, label="n0")
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "5000")  # the user's, under the second name: it stays read
    env = torchrun.environment(cfg, cuda=True, label="n0")
    assert "TORCH_FR_BUFFER_SIZE" not in env and env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "5000"
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE")
    mine = TrainerConfig(run_dir=str(tmp_path), run_id="r", env={"TORCH_NCCL_TRACE_BUFFER_SIZE": "64"})
    assert "TORCH_FR_BUFFER_SIZE" not in torchrun.environment(mine, cuda=True, label="n0")


def test_log_dir_is_per_node_under_the_runs_records(tmp_path):
    cfg = TrainerConfig(run_dir=str(tmp_path), run_id="r")
    assert torchrun.log_dir(cfg, "n7") == tmp_path / "r" / "logs" / "n7"


# -- records.py -----------------------------------------------------------------------------------------
def _gone_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60)
    return int(proc.stdout)


def test_temp_files_of_gone_writers_are_removed_live_and_fresh_ones_kept(tmp_path):
    gone = _gone_pid()
    run = tmp_path / "run1"
    (run / "snapshots").mkdir(parents=True)
    (tmp_path / ".data").mkdir()
    debris = [run / "snapshots" / f".latest.pt.tmp{gone}", run / f".run.json.{gone}.tmp", tmp_path / ".data" /
              f"corpus.tmp{gone}"]
    live = run / "snapshots" / f".latest.pt.tmp{os.getppid()}"  # a writer that is alive
    other = run / "snapshots" / "latest.pt"  # not a temp file at all
    for path in (*debris, live, other):
        path.write_text("x")
    old = time.time() - 3600
    for path in (*debris, live):
        os.utime(path, (old, old))
    assert sorted(records.temp_files(tmp_path)) == sorted([*debris, live])
    assert sorted(records.clean_temps(tmp_path)) == sorted(debris)
    assert live.exists() and other.exists() and not any(p.exists() for p in debris)


def test_a_fresh_temp_file_is_kept_unless_told_the_run_is_over(tmp_path):
    gone = _gone_pid()
    (tmp_path / "run1").mkdir()
    fresh = tmp_path / "run1" / f".run.json.{gone}.tmp"  # another node's writer, perhaps: its pid means nothing here
    fresh.write_text("x")
    assert records.clean_temps(tmp_path) == [] and fresh.exists()
    assert records.clean_temps(tmp_path, stale_s=0, run="run1") == [fresh] and not fresh.exists()


def test_start_info_and_its_description(tmp_path):
    assert records.start_info(tmp_path, None) == {"fresh": True}
    assert console_trainer.describe_start(records.start_info(tmp_path, None)) == "started from scratch (no snapshot resumed)"
    (tmp_path / "resumed.json").write_text('{"step": 40, "snapshot": "/r/a/snapshots/latest.pt"}')
    start = records.start_info(tmp_path, "a")
    assert start == {"fresh": False, "from_run": "a", "step": 40, "snapshot": "/r/a/snapshots/latest.pt"}
    assert console_trainer.describe_start(start) == "resumed from run a at step 40"
    (tmp_path / "resumed.json").write_text("{broken")
    assert console_trainer.describe_start(records.start_info(tmp_path, "a")) == "resumed from run a"
    assert console_trainer.describe_start(None) == "started from scratch (no snapshot resumed)"


# -- gate.py --------------------------------------------------------------------------------------------
def _doc(iface: str) -> dict:
    """A preflight document as the gate reads it: this node's exports, by check (exports.exported)."""
    return {"this_node": "n1", "nodes": {"n1": {"exports": {"network": {"interface": {"name": iface}},
                                                            "mesh": {"interface": {"addr": "10.0.0.2"}}}}}}


def test_the_interface_towards_the_master_goes_to_nccl_and_gloo():
    assert gate.interfaces_from(_doc("eth1")) == {"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1"}


def test_no_interface_advice_for_loopback_or_without_a_document():
    assert gate.interfaces_from(None) == {}
    assert gate.interfaces_from({"this_node": "n1", "nodes": {}}) == {}
    assert gate.interfaces_from(_doc("lo")) == {}  # loopback: nothing a multi-node job could use


# -- bootstrap.py's command line ------------------------------------------------------------------------
def test_bootstrap_parses_a_script_or_a_module_as_python_would():
    import pytest

    from ddpdoctor.launch import bootstrap

    assert bootstrap.parse(["train.py", "--lr", "3"]) == ("path", "train.py", ["--lr", "3"])
    assert bootstrap.parse(["--", "train.py"]) == ("path", "train.py", [])
    assert bootstrap.parse(["-m", "pkg.train", "-m", "x"]) == ("module", "pkg.train", ["-m", "x"])
    for bad in ([], ["-m"], ["--lr", "3"]):
        with pytest.raises(SystemExit) as exc:
            bootstrap.parse(bad)
        assert exc.value.code == bootstrap.USAGE


def test_bootstrap_records_the_node_rank_on_local_rank_0_and_run_trainer_reads_it(tmp_path, monkeypatch):
    """GROUP_RANK from torchrun's rendezvous -> <logs>/node.json; records.node_of reads it and, on a shared run
    dir, finds node rank 0's log dir. Only local rank 0 writes; nonsense or a FIFO reads as unknown."""
    import os

    from ddpdoctor.launch import bootstrap, records

    master, me = tmp_path / "logs" / "n0-127.0.0.1-1", tmp_path / "logs" / "n1-127.0.0.2-2"
    for d in (master, me):
        d.mkdir(parents=True)
    for d, group_rank, local_rank in ((master, "0", "0"), (me, "1", "1"), (me, "1", "0")):
        monkeypatch.setenv("DDPDOCTOR_NODE_FILE", str(d / "node.json"))
        monkeypatch.setenv("GROUP_RANK", group_rank)
        monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", local_rank)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        bootstrap.record_node_rank()
    assert records.node_of(me) == {"node_rank": 1, "nnodes": 2, "master_addr": "127.0.0.1",
                                   "master_logs": str(master.resolve())}
    assert records.node_of(master) == {"node_rank": 0, "nnodes": 2, "master_addr": "127.0.0.1"}
    assert not list(tmp_path.glob("logs/*/*.tmp"))
    (me / "node.json").write_text('{"node_rank": "zero"}')
    assert records.node_of(me) is None
    (me / "node.json").unlink()
    os.mkfifo(me / "node.json")  # never blocks
    assert records.node_of(me) is None and records.node_of(tmp_path / "nowhere") is None
