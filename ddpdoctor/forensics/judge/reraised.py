"""A library that gathers one rank's exception and raises it on every rank (torch.distributed.checkpoint) names the
rank it came from: that rank is the root cause, never the rank that exited first with the copy."""
from __future__ import annotations

import re
from dataclasses import replace

from ...grouping import rank_ranges
from ..evidence.model import RankFailure

# A library that gathers every rank's exception and raises it on every rank names the ranks it came from:
# torch.distributed.checkpoint's "CheckpointException ranks:dict_keys([1])" and its "Traceback ... (RANK 1)".
LIBRARY_NAMED = re.compile(r"CheckpointException ranks:\s?dict_keys\(\[(?P<ranks>\d{1,9}(?:, ?\d{1,9}){0,63})\]\)|"
                           r"Traceback \(most recent call last\): \(RANK (?P<one>\d{1,9})\)")


def library_named_ranks(f: RankFailure) -> list[int]:
    """The ranks a library says the exception came from (it re-raised it on every rank), in its order."""
    text = "\n".join(x for x in (f.message or "", f.traceback, f.log_tail) if x)
    out: list[int] = []
    for m in LIBRARY_NAMED.finditer(text):
        for part in (m["ranks"] or m["one"] or "").split(","):
            rank = int(part) if part.strip().isdigit() else None
            if rank is not None and rank not in out:
                out.append(rank)
    return out


def named_by_the_library(root: RankFailure, failures: list[RankFailure]) -> RankFailure:
    """A library that re-raises one rank's exception on every rank (torch.distributed.checkpoint) names that rank:
    it is the root cause, not the rank that exited first with the copy. Its own record when it left one, else the
    copy, said as that rank's."""
    named = library_named_ranks(root)
    if not named or root.rank in named:
        return root
    own = [f for f in failures if f.rank in named]
    if own:
        chosen = min(own, key=lambda f: named.index(f.rank))
    else:
        chosen = replace(root, rank=named[0], local_rank=None, host=None, exit_code=None, signal=None)
        failures.append(chosen)
    root.victim = True
    root.reason = (f"re-raised rank {named[0]}'s exception: the library gathered it and raised it on every rank "
                   f"(it names rank(s) {rank_ranges(named)})")
    return chosen
