"""Fault injection for tests and demos: --fail-at-step K --fail-rank R --fail-mode exception|exit|sigkill|hang."""
from __future__ import annotations

import os
import signal
import sys
import time

MODES = ("exception", "exit", "sigkill", "hang")


class InjectedFailure(RuntimeError):
    """Raised by --fail-mode exception: a stand-in for a bug in the training step."""


def maybe_fail(step: int, rank: int, args) -> None:
    if args.fail_at_step is None or step != args.fail_at_step or rank != args.fail_rank:
        return
    # Only on the chosen attempt, so a restarted job can get past the fault and prove the resume.
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) != args.fail_attempt:
        return
    mode = args.fail_mode
    if getattr(args, "fail_exit_s", 0.0) > 0:
        import atexit

        atexit.register(time.sleep, args.fail_exit_s)  # runs after the exception, before the process ends
    if mode == "exception":
        raise InjectedFailure(f"injected failure at step {step} on rank {rank}")
    if mode == "exit":
        print(f"injected exit(3) at step {step} on rank {rank}", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        print(f"injected hang at step {step} on rank {rank}", file=sys.stderr, flush=True)
        hang_forever()


def hang_forever() -> None:
    """A Python-level hang (sleeping), so a stack dump shows exactly where this rank is stuck."""
    while True:
        time.sleep(1.0)
