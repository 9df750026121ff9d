"""The launcher table's rule for which process is a rank (issue 45 item 1): an agent (torchrun, accelerate launch,
mpirun's, srun's) is walked through whatever rank variable it inherited; told by the program run, never by a path
that merely contains a launcher's name; a process whose children carry another rank identity is an agent too."""
from __future__ import annotations

from ddpdoctor.launchers.agents import is_agent, program, starts_ranks


def test_agents_are_told_by_the_program_they_run():
    assert is_agent(["/venv/bin/python3", "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"])
    assert is_agent(["torchrun", "--nnodes", "3", "train.py"])
    assert is_agent(["/usr/bin/python3.11", "-X", "dev", "-m", "torch.distributed.run", "train.py"])
    assert is_agent(["python", "-m", "torch.distributed.launch", "train.py"])
    assert is_agent(["/venv/bin/python", "/venv/bin/accelerate", "launch", "train.py"])
    assert is_agent(["/usr/bin/orted", "-mca", "ess", "env"]) and is_agent(["srun", "--overlap", "hostname"])


def test_a_rank_whose_path_names_a_launcher_is_still_a_rank():
    assert not is_agent(["/venv/bin/python", "/home/u/torchrun-tests/train.py"])
    assert not is_agent(["python", "-m", "ddpdoctor.launch.bootstrap", "/job/train.py"])
    assert not is_agent(["/venv/bin/python", "/venv/bin/accelerate", "env"])  # not its launch
    assert not is_agent(["python", "-c", "import torchrun"]) and not is_agent([])
    assert program(["python", "-W", "ignore", "train.py", "--lr", "1"]) == ("train.py", "--lr")


def test_a_process_whose_children_carry_another_rank_started_them():
    agent = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}  # torchrun under srun: srun's rank, none of torch's
    workers = [dict(agent, RANK="0", LOCAL_RANK="0"), dict(agent, RANK="1", LOCAL_RANK="1")]
    assert starts_ranks(agent, workers, ["RANK", "SLURM_PROCID"])
    rank = {"RANK": "1", "WORLD_SIZE": "4"}
    assert not starts_ranks(rank, [dict(rank)], ["RANK", "SLURM_PROCID"])  # a DataLoader worker: its env whole
    assert not starts_ranks(rank, [], ["RANK"])
