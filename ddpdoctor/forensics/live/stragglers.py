"""Live stragglers: each rank's lateness into collectives, from the flight records the hang watchdog already
polls (no change to the user's script, no extra request to the ranks); a rank persistently slower than the
others is named once, while the job runs, with how much slower it is and where the extra time goes."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable

# What makes a straggler (README "Stragglers", tests/benchmarks/bench_stragglers.py measures the false alarms):
WINDOW = 40          # the latest collectives every rank recorded, judged together
MIN_COLLECTIVES = 10  # fewer matched collectives: no judgement yet
MIN_EXCESS_S = 0.05  # its own code takes at least this much longer than the others' where its extra time lands
MIN_RATIO = 2.0      # ... and at least this many times the others' time in their own code
MIN_LAST_SHARE = 0.75  # the others waited for it alone at least this share of their waiting (jitter: anyone)
PERSIST = 3          # the same rank, judged so on this many polls in a row, each with new collectives
KEEP = 400           # collectives remembered per attempt (a bounded memory on a long job)
CAP_X = 1000.0       # "slower_x" when the others spend (next to) no time in their own code
# Send/recv-only jobs (stacks polled once a poll): the latest SAMPLES polls, judged from MIN_SAMPLES on; the
# straggler was in its own code in OWN_SHARE of them, every other rank waiting in as many.
SAMPLES, MIN_SAMPLES, OWN_SHARE = 20, 6, 0.75


@dataclass
class Straggler:
    """A rank named a straggler: figures are per collective, medians and sums over the judged window."""
    rank: int
    slower_x: float          # its time in its own code / the others' (median of the others)
    own_s: float             # its time per collective outside collectives (its own code: compute, data, I/O)
    others_own_s: float      # the others' (median)
    others_wait_s: float     # the others' time per collective waiting inside collectives (for it)
    wait_s: float            # its own time waiting inside collectives
    late_s: float            # median lateness into a collective behind the others' median entry
    last_share: float        # share of the judged collectives it entered last
    collectives: int         # collectives judged
    interval_s: float        # one collective every ... (the job's rhythm, median)
    attempt: int = 0         # torchrun's restart count when named
    named_after_s: float | None = None  # seconds after this attempt's workers started
    sampled: int = 0         # a send/recv-only job: judged from this many polls of the stacks (no flight record)

    def to_json(self) -> dict:
        return asdict(self)


def _created(fr: dict | None) -> dict[tuple[str, int], int]:
    """(process group, sequence id) -> time_created_ns of each collective in one rank's flight record."""
    out = {}
    for e in (fr or {}).get("entries") or []:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        try:
            pg = str((e.get("process_group") or [e.get("pg_id")])[0])
            out[(pg, int(e["collective_seq_id"]))] = int(e["time_created_ns"])
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    return out


def judge(created: dict[tuple, dict[int, int]], ranks: list[int]) -> Straggler | None:
    """The straggler among ``ranks`` from when each entered each collective, or None. A collective can only
    complete once its last rank has entered it: until then the others wait inside it (waiting), and what a
    rank spends between that moment and its next entry is its own code."""
    if len(ranks) < 2:
        return None
    rows = sorted((sorted(by.values())[len(by) // 2], by) for by in created.values() if all(r in by for r in ranks))
    rows = [by for _, by in rows[-WINDOW:]]
    if len(rows) < MIN_COLLECTIVES:
        return None
    own = {r: 0.0 for r in ranks}
    wait = {r: 0.0 for r in ranks}
    gaps: dict[int, list[float]] = {r: [] for r in ranks}  # its own code before each collective
    late: dict[int, list[float]] = {r: [] for r in ranks}
    last = {r: 0 for r in ranks}
    waited_for = {r: 0.0 for r in ranks}  # how long the others waited for it alone (it came last)
    for prev, cur in zip(rows, rows[1:]):
        done = max(prev[r] for r in ranks)  # the previous collective could complete once its last rank came
        for r in ranks:
            gaps[r].append(max(0, cur[r] - done) / 1e9)
            own[r] += gaps[r][-1]
            wait[r] += (done - prev[r]) / 1e9
    for by in rows:
        order = sorted(ranks, key=lambda r: by[r])
        last[order[-1]] += 1
        waited_for[order[-1]] += (by[order[-1]] - by[order[-2]]) / 1e9
        for r in ranks:
            late[r].append((by[r] - statistics.median(by[s] for s in ranks if s != r)) / 1e9)
    n = len(rows) - 1
    worst = max(ranks, key=lambda r: own[r])
    others = [r for r in ranks if r != worst]
    others_own = statistics.median(own[r] for r in others) / n
    mine = own[worst] / n
    share = last[worst] / len(rows)
    # Many collectives a step (FSDP2's per-layer all-gathers, tensor parallelism's): its extra time lands before
    # one of them, so it is judged where it lands: the excess of its own code over the others' before each
    # collective, weighted by itself (a few large gaps count, jitter's many small ones do not), and the share of
    # the time the others waited for it alone.
    excess = [g - statistics.median(gaps[r][i] for r in others) for i, g in enumerate(gaps[worst])]
    excess = [e for e in excess if e > 0]
    landed = sum(e * e for e in excess) / sum(excess) if excess else 0.0
    total_wait = sum(waited_for.values())
    waited_share = waited_for[worst] / total_wait if total_wait > 0 else 0.0
    if landed < MIN_EXCESS_S or mine < MIN_RATIO * others_own or waited_share < MIN_LAST_SHARE:
        return None
    starts = [statistics.median(by.values()) for by in rows]
    return Straggler(rank=worst, slower_x=round(min(mine / others_own, CAP_X), 1) if others_own > 0 else CAP_X,
                     own_s=round(mine, 4), others_own_s=round(others_own, 4),
                     others_wait_s=round(statistics.median(wait[r] for r in others) / n, 4),
                     wait_s=round(wait[worst] / n, 4), late_s=round(statistics.median(late[worst]), 4),
                     last_share=round(share, 2), collectives=len(rows),
                     interval_s=round(statistics.median(b - a for a, b in zip(starts, starts[1:])) / 1e9, 4))


def judge_groups(created: dict[tuple, dict[int, int]], ranks: list[int]) -> Straggler | None:
    """``judge`` over the collectives every rank recorded, else per process group among its members: on a 2-D
    mesh (tensor x data parallel) no collective has every rank, each pair's and each column's have theirs."""
    found = judge(created, ranks)
    if found is not None:
        return found
    by_group: dict[str, dict[tuple, dict[int, int]]] = {}
    for key, by in created.items():
        by_group.setdefault(key[0], {})[key] = by
    named: dict[str, Straggler] = {}
    members: dict[str, list[int]] = {}
    for group in sorted(by_group):
        members[group] = sorted({r for by in by_group[group].values() for r in by})
        if 2 <= len(members[group]) < len(ranks):
            found = judge(by_group[group], members[group])
            if found is not None:
                named[group] = found
    # A rank late into its own pair's collectives because it waited for the straggler in another group is no
    # straggler: named only where no group it belongs to names another rank.
    for group, found in sorted(named.items()):
        if all(other.rank == found.rank for g, other in named.items() if found.rank in members[g]):
            return found
    return None


def line(s: Straggler) -> str:
    """The live line: which rank, how much slower, where the extra time goes."""
    times = "more than 100x" if s.slower_x > 100 else f"{s.slower_x:g}x"
    if s.sampled:
        return (f"ddpdoctor: straggler: rank {s.rank} was in its own code in {round(s.last_share * 100)}% of the "
                f"latest {s.sampled} looks at its stack while every other rank waited for a send/recv (a stage "
                "slower than its neighbours); not a hang: the job goes on")
    return (f"ddpdoctor: straggler: rank {s.rank} is {times} slower than the others in its own code "
            f"({s.own_s:.3g} s per collective, the others {s.others_own_s:.3g} s); the others wait "
            f"{s.others_wait_s:.3g} s in each collective for it (it entered last {round(s.last_share * 100)}% of "
            f"the latest {s.collectives}); not a hang: the job goes on")


@dataclass
class Live:
    """Fed by the hang watchdog's poll: the ranks' newest flight records. Names a straggler once it has been
    judged so on PERSIST polls in a row (each with new collectives); ``say`` prints the line."""
    say: Callable[[str], None] | None = None
    named: list[Straggler] = field(default_factory=list)
    attempt: int = 0
    _created: dict = field(default_factory=dict)
    _candidate: tuple[int, int] | None = None  # (rank, polls in a row)
    _seen: int = 0
    _started: float | None = None
    _samples: list = field(default_factory=list)  # send/recv-only jobs: per poll, the ranks in their own code

    def restart(self, now: float) -> None:
        """New workers (torchrun restarted the job, or its first start): what the others did is forgotten."""
        if self._started is not None:
            self.attempt += 1
        self._created, self._candidate, self._seen, self._started = {}, None, 0, now
        self._samples = []

    def observe(self, frs: dict[int, dict], now: float) -> Straggler | None:
        """Take the ranks' records; return the straggler if it is named by this poll."""
        if not frs:  # no worker answered yet: nothing started (a poll before the first workers is no attempt)
            return None
        if self._started is None:
            self._started = now
        for rank, fr in frs.items():
            for key, t in _created(fr).items():
                self._created.setdefault(key, {})[rank] = t
        if len(self._created) > KEEP:
            for key in sorted(self._created, key=lambda k: min(self._created[k].values()))[:-KEEP]:
                del self._created[key]
        matched = sum(len(by) for by in self._created.values() if len(by) > 1)  # a 2-D mesh: no key has every rank
        if matched == self._seen:  # no new collective since the last poll: nothing new to judge
            return None
        self._seen = matched
        found = judge_groups(self._created, sorted(frs))
        if found is None:
            self._candidate = None
            return None
        polls = self._candidate[1] + 1 if self._candidate and self._candidate[0] == found.rank else 1
        self._candidate = (found.rank, polls)
        if polls < PERSIST or any(s.rank == found.rank and s.attempt == self.attempt for s in self.named):
            return None
        found.attempt, found.named_after_s = self.attempt, round(now - self._started, 1)
        self.named.append(found)
        if self.say is not None:
            self.say(line(found))
        return found

    def sample(self, own: dict[int, bool], now: float, poll_s: float) -> Straggler | None:
        """A send/recv-only job (a pipeline: gloo records no send/recv, so no flight record times it): each poll,
        which ranks stand in their own code and which wait (their stacks). A rank found in its own code in most
        of the latest polls while every other rank was found waiting in most is the straggler (a stage slower
        than its neighbours, who wait for it); named once, as ``observe`` names one."""
        if len(own) < 2:
            return None
        if self._started is None:
            self._started = now
        self._samples = (self._samples + [dict(own)])[-SAMPLES:]
        if len(self._samples) < MIN_SAMPLES:
            return None
        ranks = sorted(own)
        share = {r: sum(1 for x in self._samples if x.get(r)) / len(self._samples) for r in ranks}
        worst = max(ranks, key=lambda r: share[r])
        others = [share[r] for r in ranks if r != worst]
        if share[worst] < OWN_SHARE or max(others) > 1 - OWN_SHARE:
            return None
        if any(s.rank == worst and s.attempt == self.attempt for s in self.named):
            return None
        ratio = share[worst] / statistics.median(others) if statistics.median(others) > 0 else CAP_X
        found = Straggler(rank=worst, slower_x=round(min(ratio, CAP_X), 1), own_s=round(share[worst] * poll_s, 3),
                          others_own_s=round(statistics.median(others) * poll_s, 3),
                          others_wait_s=round((1 - statistics.median(others)) * poll_s, 3),
                          wait_s=round((1 - share[worst]) * poll_s, 3), late_s=0.0, last_share=round(share[worst], 2),
                          collectives=0, interval_s=poll_s, attempt=self.attempt,
                          named_after_s=round(now - self._started, 1), sampled=len(self._samples))
        self.named.append(found)
        if self.say is not None:
            self.say(line(found))
        return found

    def to_json(self) -> list[dict]:
        return [s.to_json() for s in self.named]
