"""Injected faults for nccl-bench's own tests and the diagnosis benchmark: a slow, dead, hung or corrupting rank.

The harness calls the three hooks of ``FAULTS``; without any ``DDPDOCTOR_BENCH_TEST_*`` variable they are
no-ops (``NoFaults``), so the measured loop runs as it would without them. Never set in normal use.
"""
from __future__ import annotations

import os
import time

CORRUPT_RANK = "DDPDOCTOR_BENCH_TEST_CORRUPT_RANK"  # one wrong element in this rank's checked result
DIE_RANK = "DDPDOCTOR_BENCH_TEST_DIE_RANK"  # SIGKILL itself at DIE_AT_BYTES
DIE_AT_BYTES = "DDPDOCTOR_BENCH_TEST_DIE_AT_BYTES"
SLOW_RANK = "DDPDOCTOR_BENCH_TEST_SLOW_RANK"  # sleeps 50 ms before each op: a slow node, for localisation
HANG_RANK = "DDPDOCTOR_BENCH_TEST_HANG_RANK"  # stops answering (sleeps) at DIE_AT_BYTES: a hung rank


class NoFaults:
    def before_size(self, rank: int, size: int) -> None:
        pass

    def before_op(self, rank: int) -> None:
        pass

    def after_check(self, rank: int, result) -> None:
        pass


class EnvFaults(NoFaults):
    """The faults the environment asks for (read once, when the worker starts)."""

    def __init__(self, env=os.environ):
        self.corrupt, self.die, self.hang, self.slow = (env.get(v) for v in (CORRUPT_RANK, DIE_RANK, HANG_RANK,
                                                                            SLOW_RANK))
        self.at = int(env.get(DIE_AT_BYTES, "0") or 0)

    def before_size(self, rank, size):
        if size < self.at:
            return
        if self.die == str(rank):
            os.kill(os.getpid(), 9)
        if self.hang == str(rank):
            while True:
                time.sleep(1.0)

    def before_op(self, rank):
        if self.slow == str(rank):  # the global rank: a slow node is slow in every group
            time.sleep(0.05)

    def after_check(self, rank, result):
        if self.corrupt == str(rank):
            result.view(-1)[0] = 12345


def from_env(env=os.environ) -> NoFaults:
    wanted = any(env.get(v) for v in (CORRUPT_RANK, DIE_RANK, HANG_RANK, SLOW_RANK))
    return EnvFaults(env) if wanted else NoFaults()


FAULTS: NoFaults = from_env()
