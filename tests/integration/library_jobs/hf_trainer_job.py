"""A Hugging Face `Trainer` job as users write it on CPU: `TrainingArguments(use_cpu=True, ddp_timeout=20)`, a small
model, a dataset of random tensors, launched by torchrun (the Trainer sets up DDP on gloo itself). The fault is in
a rank's own code, a callback at the start of a step (faults.py): `python hf_trainer_job.py healthy | hang`."""
import os

import faults
import torch
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

WIDTH = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(WIDTH, 1)

    def forward(self, x, labels=None):
        out = self.layer(x).squeeze(-1)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(WIDTH, generator=g), "labels": torch.randn((), generator=g)}


class Fault(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        faults.inject(int(os.environ.get("RANK", "0")), state.global_step)


def main():
    args = TrainingArguments(output_dir=os.environ.get("RESULTS_DIR", "hf_out"), use_cpu=True, ddp_backend="gloo",
                             ddp_timeout=20, max_steps=faults.steps(12, straggler=40), per_device_train_batch_size=8,
                             logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
                             dataloader_num_workers=0)
    trainer = Trainer(model=Model(), args=args, train_dataset=Data(), callbacks=[Fault()])
    losses = []

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    trainer.add_callback(Losses())
    trainer.train()
    faults.report(int(os.environ.get("RANK", "0")), losses)


if __name__ == "__main__":
    main()
