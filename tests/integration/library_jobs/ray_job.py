"""Data parallel training with Ray Train, as users write it: a `TorchTrainer` over CPU workers
(`ScalingConfig(use_gpu=False)`), `ray.train.torch.prepare_model` wrapping the model in DDP on gloo, DDP's
gradient all_reduce inside loss.backward(). Ray starts the workers (its own worker processes, no torchrun) and
sets their rank variables inside each one after it starts. `python ray_job.py FAULT [--workers N] [--steps N]
[--hang-when FILE]`; the fault is in the rank's own code between its forward and its backward (faults.py); --steps:
a healthy job that runs long enough to be watched; --hang-when: healthy until FILE exists, then rank 1 hangs (one
Ray start-up serves a test of both). Ray's own start-up is kept small: no
dashboard, the workers' output not sent to the driver (RAY_TMPDIR: where Ray keeps its session; RESULTS_DIR: Ray
Train's storage path)."""
import os
import sys

import faults
import ray
import ray.train
import ray.train.torch
import torch
import torch.nn.functional as F
from torch import nn

STEPS = faults.steps(30, straggler=60)
PG_TIMEOUT_S = 30  # the process group's: a hang ends here, as the other library jobs' 20 s do (Ray starts slower)


def train_loop(config: dict) -> None:
    # The worker is Ray's own process, started with Ray's arguments: the fault and its file come with the config.
    faults.FAULT = config["fault"]
    if config["stall_file"]:
        os.environ["STALL_FILE"] = config["stall_file"]
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(config["steps"]):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
        loss = F.mse_loss(model(x), y)
        if config["hang_when"] and faults.FAULT == "healthy" and os.path.exists(config["hang_when"]):
            faults.FAULT, faults.FAULT_STEP = "hang", step  # a test's switch: healthy so far, rank 1 hangs now
        faults.inject(rank, step)
        loss.backward()  # DDP's gradient all_reduce
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    faults.report(rank, losses)


def main():
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 2
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else STEPS
    hang_when = sys.argv[sys.argv.index("--hang-when") + 1] if "--hang-when" in sys.argv else ""
    ray.init(num_cpus=workers + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    trainer = ray.train.torch.TorchTrainer(
        train_loop, train_loop_config={"fault": faults.FAULT, "steps": steps, "hang_when": hang_when,
                                       "stall_file": os.environ.get("STALL_FILE", "")},
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=False),
        torch_config=ray.train.torch.TorchConfig(backend="gloo", timeout_s=PG_TIMEOUT_S),
        run_config=ray.train.RunConfig(storage_path=os.environ.get("RESULTS_DIR")))  # None: ~/ray_results
    trainer.fit()
    ray.shutdown()


if __name__ == "__main__":
    main()
