"""The one size-mismatch judge: ranks that called different things where they should have called the same, and
whose message had another size than its receiver expected. Judged by comparing what each rank called (op,
sizes, dtypes, splits), never by what the backend said: the rank gloo aborts is the one that received a message
of another size, which need not be the one whose call differs.

From the records every rank's flight recorder keeps (on every Python; gloo and NCCL record a collective's
input/output sizes, NCCL also its send/recv; evidence/flight_recorder.py):
- a collective: the calls at one sequence id of one group; the majority's call is right, the minority named;
  on a tie the call new to the job (nowhere earlier) is the odd one, else no rank is named (``judge_group``);
  completed ones too, where the sizes must agree (``judge_completed``: an uneven broadcast the backend let by);
- a send and its recv: the sizes a rank sent against the sizes its peer posted; the pipeline's other transfers
  (and the same rank's earlier ones) are the majority that decides which end is wrong (``judge_p2p``);
- an all_to_all: what each rank sends must be what the others expect; with splits where a source kept them
  (``judge_a2a``), else by the totals the records hold (``judge_a2a_totals``): the elements all ranks put in
  must be the elements all take out; the rank whose input changed from its own previous all_to_all while every
  other rank's stayed is the odd one.

From the sizes run-trainer's size watch kept (Python 3.12+: evidence/call_sizes.py, ``find``/``unnoticed``/
``adopt``): every sent message is paired with its receive (the k-th send from a to b with b's k-th receive from
a, on the same group; an all-to-all's k-th call on a group with each member's), and the bytes compared. Of a pair
that disagrees, the side whose size changed from its own previous call on that channel is the odd one: the other
kept what both agreed on the step before. Where both changed, or there is no step before, both are named as
candidates and neither as the culprit. In a job that failed, any pair; in a job that ended normally, only an
all_to_all's (``unnoticed``): gloo accepts a message shorter than the receiver's buffer, so a job ends with exit
0 and values the sender never wrote in the receiver's split (a send/recv into a larger buffer may be meant; an
all_to_all split the receiver declared never is). Where neither a record nor the watch holds the sizes (a
send/recv over gloo on Python 3.10/3.11), ``unjudged`` says so once.
"""
from __future__ import annotations

from .kept import FIX, SizeMismatch, adopt, describe, find, unnoticed, warning
from .records import (REASONS, SAME_SIZES, TotalsFinding, a2a_totals, judge_a2a, judge_a2a_totals, judge_completed,
                      judge_group, judge_p2p, numel, unjudged, what_differs)

__all__ = ["FIX", "REASONS", "SAME_SIZES", "SizeMismatch", "TotalsFinding", "a2a_totals", "adopt", "describe", "find",
           "judge_a2a", "judge_a2a_totals", "judge_completed", "judge_group", "judge_p2p", "numel", "unjudged",
           "unnoticed", "warning", "what_differs"]
