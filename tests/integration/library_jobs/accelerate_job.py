"""Training with Hugging Face Accelerate on CPU, as users write it: `accelerator.prepare` wraps the model in DDP,
`accelerator.backward(loss)` runs DDP's gradient all_reduce. Under torchrun Accelerate takes its ranks from the
environment. `python accelerate_job.py FAULT`; the fault is in the rank's own code before its backward."""
from datetime import timedelta

import faults
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from torch import nn

STEPS = faults.steps(30, straggler=60)


def main():
    accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="gloo",
                                                                               timeout=timedelta(seconds=20))])
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
        loss = F.mse_loss(model(x), y)
        faults.inject(rank, step)
        accelerator.backward(loss)  # DDP's gradient all_reduce
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    faults.report(rank, losses)
    accelerator.end_training()


if __name__ == "__main__":
    main()
