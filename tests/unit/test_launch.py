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
    cfg = validate(TrainerConfig(nproc_per_node=2, run_dir=str(tmp_path),
                                 env={"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}))
    cpu = torchrun.environment(cfg, cuda=False)
    assert cpu["OMP_NUM_THREADS"] == str(cfg.omp_threads) and int(cpu["OMP_NUM_THREADS"]) >= 1
    assert cpu["GLOO_SOCKET_IFNAME"] == "eth9" and cpu["NCCL_SOCKET_IFNAME"] == "lo"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in cpu  # the flight recorder only on GPU
    gpu = torchrun.environment(cfg, cuda=True)
    assert gpu["TORCH_NCCL_TRACE_BUFFER_SIZE"] and gpu["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
