"""NCCL's own watchdog timeout in the verdict: a job whose ranks aborted on their NCCL timeout ended of itself, not
from outside, and the ranks' watchdog lines (evidence.nccl_watchdog) say which rank is behind: named when its own
line says it never enqueued the work, only the likely one when it wrote no timeout line at all (its silence is
no proof). Lines of one process group are compared only with that group's.

``adopt`` runs on a finished job's findings (postmortem, run-trainer's end) before the flight records' verdict
(attribution.adopt), which outranks it: NCCL's numbers say who never enqueued the work, the records say where it
stood. It replaces only what the logs guessed without a rank (a stuck collective, a stop from outside) or a
"likely" rank; a real error (an exception, a SIGKILL) stays the root cause."""
from __future__ import annotations

from ..evidence import nccl_watchdog
from ..evidence.model import RankFailure
from ..judge.verdict import Findings
from .attribution import hang_timeout_advice

# The root cause a watchdog timeout gives (run-trainer's end keeps it past a later stop: it came first)
ERROR_TYPES = ("nccl_timeout_behind", "nccl_timeout", "likely_nccl_timeout_behind")
NO_NUMBERS = ("torch 2.15's nccl2 writes no sequence numbers in its timeout lines, so which rank was behind they do "
              "not say: the ranks' flight-recorder dumps (TORCHCOMM_FR_DUMP_TEMP_FILE, `postmortem --fr-dir`) or a "
              "run under `ddpdoctor run-trainer` (every rank's stack before the timeout) do")


def adopt(verdict: Findings) -> bool:
    """The watchdog's word as the root cause where the logs had no better one; True when it was adopted."""
    timeouts = {f.rank: nccl_watchdog.parse(_text(f), f.rank) for f in verdict.failures if f.rank is not None}
    found = nccl_watchdog.behind(timeouts, verdict.world)
    root = verdict.root_cause
    if found is None or not _replaceable(root, bool(found.behind), found.likely[:1]):
        return False
    last = _in_group(timeouts, found)
    sample = next((t for t in last.values() if t.seq == found.seq), next(iter(last.values())))
    work = f"{sample.op or 'a collective'} #{found.seq}" if found.seq is not None else "a collective"
    waited = ", ".join(str(r) for r in found.timed_out) or "none"
    limit_ms = sample.timeout_ms or (sample.ran_ms if sample.backend == "nccl2" else None)  # nccl2: "after N ms"
    limit = f" after {limit_ms / 1000:g} s" if limit_ms else ""
    fix = hang_timeout_advice(limit_ms / 1000 if limit_ms else None)
    old = [f for f in ([root] if root else []) + list(verdict.consequences) if f.rank is not None]
    if found.behind:
        first = found.behind[0]
        own = next((f for f in old if f.rank == first), None)
        new = RankFailure(
            rank=first, local_rank=own.local_rank if own else None, host=own.host if own else None,
            exit_code=own.exit_code if own else None, signal=own.signal if own else None,
            attempt=own.attempt if own else 0, category="hang", error_type=ERROR_TYPES[0],
            message=(f"rank(s) {', '.join(map(str, found.behind))} never reached {work}: NCCL's own watchdog timed "
                     f"out on rank(s) {waited} in it{limit} ({_why(last, found)}); the job aborted itself on its "
                     "NCCL timeout, it was not stopped from outside"),
            fix=f"look at what rank {first} was doing before {work} (a rank-dependent branch, a data stall, a "
                f"frozen process); {fix}")
    elif found.likely:
        new = _likely(found, old, work, waited, limit, fix)
    else:
        new = RankFailure(
            rank=None, local_rank=None, host=root.host if root else None, exit_code=None,
            attempt=root.attempt if root else 0, category="hang", error_type=ERROR_TYPES[1],
            message=(f"the job aborted itself on NCCL's own watchdog timeout (rank(s) {waited} timed out in {work}"
                     f"{limit}), it was not stopped from outside; "
                     + (NO_NUMBERS if found.seq is None else "every rank that timed out had enqueued it: none was "
                        "behind by NCCL's numbers (the communication, or a rank frozen inside the collective)")),
            fix=fix)
    consequences = []
    culprit = (found.behind or found.likely)[:1]
    for f in old:
        if f.rank in culprit:
            continue  # the culprit's own record (the launcher's SIGTERM) is its ending, not its consequence
        f.victim = f.rank not in found.behind and f.rank not in found.likely
        f.named = True if f.rank in found.behind else False if f.rank in found.likely else f.named
        f.reason = (f"behind too: never reached {work}" if f.rank in found.behind else
                    f"likely behind too: no NCCL timeout line of its own" if f.rank in found.likely else
                    f"NCCL's watchdog timed out in {work}" + (f" waiting for rank {found.behind[0]}"
                                                              if found.behind else
                                                              f" waiting, likely for rank {found.likely[0]}"
                                                              if found.likely else "")
                    if f.rank in last else f.reason or "stopped after the timeout")
        consequences.append(f)
    verdict.root_cause, verdict.consequences = new, consequences
    return True


def _likely(found: nccl_watchdog.Behind, old: list[RankFailure], work: str, waited: str, limit: str,
            fix: str) -> RankFailure:
    """The root cause when only silence points at a rank: the likely one, not named."""
    first = found.likely[0]
    own = next((f for f in old if f.rank == first), None)
    return RankFailure(
        rank=first, local_rank=own.local_rank if own else None, host=own.host if own else None,
        exit_code=own.exit_code if own else None, signal=own.signal if own else None,
        attempt=own.attempt if own else 0, category="hang", error_type=ERROR_TYPES[2], named=False,
        message=(f"likely rank(s) {', '.join(map(str, found.likely))}: NCCL's own watchdog timed out on rank(s) "
                 f"{waited} in {work}{limit}, and rank(s) {', '.join(map(str, found.likely))} wrote no NCCL "
                 "timeout line at all; a silent log is no proof that a rank never reached the work (its log may "
                 "be cut, its process gone first), so no rank is named; the job aborted itself on its NCCL "
                 "timeout, it was not stopped from outside"),
        fix=f"look at what rank {first} was doing before {work} (its stack, its flight-recorder dump say for "
            f"certain); {fix}")


def _in_group(timeouts: dict, found: nccl_watchdog.Behind) -> dict:
    """Each rank's last timeout in the group ``found`` is of (or its last, when the lines name no group)."""
    out = {}
    for r, ts in timeouts.items():
        own = [t for t in ts if t.group == found.group] if found.group is not None else ts
        if own:
            out[r] = own[-1]
    return out


def _replaceable(root: RankFailure | None, names_a_rank: bool, likely: tuple[int, ...] = ()) -> bool:
    """The logs' own guess: none, a rankless hang or stop, a timeout, or a "likely" one when NCCL names a rank
    or finds the same likely one (its words add that the job aborted itself)."""
    if root is None or root.victim or root.category == "timeout":
        return True
    if root.category not in ("hang", "signal") or root.signal not in (None, "SIGTERM", "SIGINT", "SIGABRT"):
        return False
    guessed = (root.error_type or "").startswith("likely_")
    return root.rank is None or guessed and (names_a_rank or root.rank in likely)


def _why(last: dict, found: nccl_watchdog.Behind) -> str:
    """How NCCL's numbers put each rank behind: its own last enqueued work, or its timeout in an earlier work."""
    out = []
    for r in found.behind:
        t = last.get(r)
        if t is not None and t.enqueued is not None and t.enqueued < (found.seq or 0):
            out.append(f"rank {r}'s own line: last enqueued NCCL work {t.enqueued}")
        elif t is not None and t.seq is not None:
            out.append(f"rank {r} timed out in an earlier work, #{t.seq}")
    return "; ".join(out)


def _text(f: RankFailure) -> str:
    return "\n".join(x for x in (f.message, f.traceback, f.log_tail) if x)
