"""nccl-bench: collective descriptors, bus-bandwidth formulas and the timing harness."""
