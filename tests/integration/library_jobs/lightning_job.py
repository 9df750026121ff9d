"""A LightningModule trained by Lightning's Trainer with strategy="ddp" on CPU, as users write it (DDP's gradient
all_reduce inside Lightning's backward). Under torchrun Lightning takes its ranks from the environment; started
alone (`python lightning_job.py FAULT --devices 2`) its own launcher starts the other ranks.
`python lightning_job.py FAULT`; the fault is in the rank's own training_step (faults.py)."""
import os
import sys
from datetime import timedelta

import faults
import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

STEPS = faults.steps(20, straggler=60)


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self.losses = []

    def training_step(self, batch, index):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        faults.inject(self.global_rank, index)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    devices = int(sys.argv[sys.argv.index("--devices") + 1]) if "--devices" in sys.argv else int(
        os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.manual_seed(0)
    model = Model()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16 * STEPS * devices, 32, generator=g), torch.randn(16 * STEPS * devices, 1, generator=g))
    trainer = L.Trainer(accelerator="cpu", devices=devices, num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")),
                        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=20)),
                        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=16, shuffle=False))
    faults.report(trainer.global_rank, model.losses)


if __name__ == "__main__":
    main()
