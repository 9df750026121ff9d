"""A DeepSpeed job as users write it on CPU: `deepspeed.init_distributed("gloo")`, ZeRO stage 1 with DeepSpeed's Adam
(on a cold TORCH_EXTENSIONS_DIR its C++ ops are built at start-up: rank 0 runs the compiler while rank 1 waits on
torch's build lock), launched by torchrun. The fault is in a rank's own code (faults.py):
`python deepspeed_job.py healthy | hang`."""
import os
from datetime import timedelta

import deepspeed
import faults
import torch
from torch import nn

deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds=20))
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
CONFIG = {"train_batch_size": 8 * WORLD, "train_micro_batch_size_per_gpu": 8,
          "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 1}}


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=CONFIG)
    losses = []
    for step in range(faults.steps(8, straggler=30)):
        g = torch.Generator().manual_seed(1000 * step + RANK)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(engine(x), y)
        faults.inject(RANK, step)
        engine.backward(loss)  # ZeRO's gradient reduction
        engine.step()
        losses.append(loss.item())
    faults.report(RANK, losses)


if __name__ == "__main__":
    main()
