"""Process groups across ranks: each rank's calls matched by group (member ranks, else name: never pg_id,
which is each rank's own numbering) and sequence id; what each group's newest collective shows."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..evidence.model import DEFAULT_GROUP, Call, JobEvidence


@dataclass
class Member:
    last: int = -1                 # the newest sequence id it entered
    done: int = -1                 # the newest it completed (live; gloo counts a timed-out one as completed)
    calls: dict[int, Call] = field(default_factory=dict)


@dataclass
class GroupView:
    key: str
    name: str
    members: dict[int, Member] = field(default_factory=dict)
    ranks: tuple[int, ...] | None = None     # every member, where a record says

    def waiting(self) -> list[int]:
        """Ranks inside a collective of this group that they have not completed."""
        return sorted(r for r, m in self.members.items() if m.last > m.done)

    def top(self, live: bool) -> int:
        """The collective judged: the newest a waiting rank entered (live), the newest any rank entered."""
        among = self.waiting() if live else list(self.members)
        return max((self.members[r].last for r in among), default=-1)


def views(evidence: JobEvidence) -> dict[str, GroupView]:
    """Every group any rank's record names, keyed by Group.key; a rank whose flight recorder answered with
    no entry at all is in the default group at sequence id -1 (it entered no collective yet)."""
    out: dict[str, GroupView] = {}
    for rank, state in sorted(evidence.ranks.items()):
        for g in state.groups:
            view = out.setdefault(g.key, GroupView(g.key, g.name, ranks=g.ranks))
            view.members.setdefault(rank, Member())
        for call in state.calls:
            if call.seq is None:
                continue
            g = call.group
            view = out.setdefault(g.key, GroupView(g.key, g.name, ranks=g.ranks))
            m = view.members.setdefault(rank, Member())
            m.calls[call.seq] = call
            m.last = max(m.last, call.seq)
            if call.completed:
                m.done = max(m.done, call.seq)
        if state.recorded:
            out.setdefault(DEFAULT_GROUP.key, GroupView(DEFAULT_GROUP.key, DEFAULT_GROUP.name)).members.setdefault(
                rank, Member())
    for view in out.values():
        if view.ranks is None and view.key == DEFAULT_GROUP.key and evidence.world:
            view.ranks = tuple(evidence.world)
    return out


def order(key: str) -> tuple:
    """The default group first, then by name."""
    return (0, "") if key == DEFAULT_GROUP.key else (1, key)


def history(view: GroupView, before: int) -> set[tuple]:
    """(op, call site) of every call any member made before sequence id ``before``: what the job did before."""
    return {(c.op, c.site.where if c.site else None) for m in view.members.values() for s, c in m.calls.items()
            if s < before}


@dataclass
class Finding:
    """One group's newest collective: who is in it, who is not."""
    view: GroupView
    top: int
    inside: list[int]
    missing: list[int]                  # members not inside: behind, or with no entry in the group
    silent: list[int]                   # of those, the ranks no record answered for
    behind: list[int]                   # members whose record shows a lower sequence id (or none, answered)
    waiters: list[int]
    call: Call | None
    calls: dict[int, Call] = field(default_factory=dict)
