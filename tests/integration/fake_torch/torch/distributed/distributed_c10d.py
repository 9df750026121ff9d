"""Not torch: a file at the path py-spy shows for torch's collectives, so a stand-in rank of
tests/integration/attach_standins.py reads as one waiting inside all_reduce (no torch import, no group)."""
import time


def all_reduce(tensor, op=None, group=None, async_op=False):
    while True:
        time.sleep(0.5)
