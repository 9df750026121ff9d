"""What this node has for GPUs, asked two ways: is CUDA usable (torch sees a device), is there an NVIDIA driver."""
from __future__ import annotations

import os


def cuda_available() -> bool:
    """torch imports and sees at least one usable CUDA device; never raises. Costs a torch import (~2 s)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or a broken one: no CUDA
        return False


def nvidia_driver_present() -> bool:
    """An NVIDIA kernel driver is loaded: answered from /proc and /dev without importing torch (for a
    launcher whose workers import torch anyway and that must not pay for it on every run)."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")
