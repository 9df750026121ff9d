"""The corpus: generated deterministically (no downloads), character-level, prepared once per node."""
from __future__ import annotations

import os
import random
from pathlib import Path

import torch
from torch.utils.data import Dataset

SUBJECTS = ["the cluster", "a node", "the master", "every rank", "the engineer", "a GPU", "the job", "the network"]
VERBS = ["checks", "reaches", "waits for", "trains", "reports", "restarts", "measures", "names"]
OBJECTS = ["the link", "a snapshot", "the gradient", "its peers", "the clock", "the loss", "a timeout", "the fix"]


def generate_corpus(n_sentences: int = 20000, seed: int = 1234) -> str:
    """Simple grammatical sentences: enough structure that the loss visibly falls within a few steps."""
    rng = random.Random(seed)
    return "\n".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}." for _ in range(n_sentences))


def prepare(data_dir: Path) -> Path:
    """Write the encoded corpus once (atomically); later calls and other ranks reuse it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    out = data_dir / "corpus.u8"
    if not out.exists():
        text = generate_corpus().encode("ascii")
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        try:
            tmp.write_bytes(text)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return out


def load_tokens(path: Path) -> torch.Tensor:
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).long()


class CharWindows(Dataset):
    """Every (block_size + 1)-character window, as (input, target) shifted by one."""

    def __init__(self, tokens: torch.Tensor, block_size: int, stride: int | None = None):
        self.tokens = tokens
        self.block = block_size
        self.stride = stride or block_size
        self.n = (len(tokens) - block_size - 1) // self.stride

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        start = i * self.stride
        chunk = self.tokens[start:start + self.block + 1]
        return chunk[:-1], chunk[1:]
