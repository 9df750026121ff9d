"""nccl-bench: collective benchmarks on torch.distributed with nccl-tests' definitions (see ops.py)."""
