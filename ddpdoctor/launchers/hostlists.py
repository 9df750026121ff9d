"""Host lists as launchers give them: SLURM's compressed node lists (expanded without scontrol) and host files
(PBS_NODEFILE, an MPI host file, --hosts @FILE), each bounded before anything is expanded or kept."""
from __future__ import annotations

import re
from typing import Callable

from ..errors import UsageError
from ..inputs import MAX_NODES, read_regular
from ..numbers import parse_int

# A host list is bounded before anything is expanded or kept: node[1-99999999] is one line naming the variable
# (exit 2), not 10^8 names in memory. The longest legitimate SLURM list (16k hosts spelled out) is ~200 KB;
# a PBS node file repeats a host once per slot (16k nodes x 128 slots ~ 40 MB).
MAX_LIST_CHARS = 1 << 20
MAX_NODE_FILE_BYTES = 64 << 20
_HOST_CHARS = re.compile(r"^[A-Za-z0-9._-]*$")


def expand_slurm_nodelist(nodelist: str, name: str = "SLURM_JOB_NODELIST", limit: int = MAX_NODES) -> list[str]:
    """Expand a SLURM host list (``gpu[01-03,07],login1``, ``rack[1-2]-node[01-02]``) without calling scontrol.
    The hosts are counted before any is made: an unparsable list, or one naming more than ``limit`` hosts, is
    a UsageError naming the variable (``name``)."""
    def bad(why: str) -> UsageError:
        shown = nodelist if len(nodelist) <= 80 else nodelist[:77] + "..."
        return UsageError(f"{name}={shown!r}: {why}; expected a SLURM host list such as node[01-04,07],login1 "
                          f"(`scontrol show hostnames` expands it)")

    if len(nodelist) > MAX_LIST_CHARS:
        raise bad(f"longer than {MAX_LIST_CHARS} characters")
    plans: list[list[list[str] | str]] = []  # per host pattern: literal text and bracket groups' ranges
    total = 0
    for part in _split_outside_brackets(nodelist, bad):
        plan: list[list[str] | str] = []
        count = 1
        for literal, group in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", part):
            if not _HOST_CHARS.match(literal):
                raise bad(f"{next(c for c in literal if not _HOST_CHARS.match(c))!r} cannot be in a host name")
            if literal:
                plan.append(literal)
            if group:
                ranges = _ranges(group, bad)
                count *= sum(int(hi) - int(lo) + 1 for lo, hi in ranges)
                plan.append(ranges)  # type: ignore[arg-type]
            if count > limit:
                break
        total += count
        if total > limit:
            raise bad(f"names more than {limit} hosts, the most ddpdoctor takes")
        plans.append(plan)
    hosts: list[str] = []
    for plan in plans:
        hosts.extend(_expand(plan))
    return hosts


def _split_outside_brackets(text: str, bad: Callable[[str], UsageError]) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise bad("a bracket inside a bracket")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise bad("a ']' without its '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise bad("a '[' without its ']'")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _ranges(group: str, bad: Callable[[str], UsageError]) -> list[tuple[str, str]]:
    """"01-03,07" -> [("01", "03"), ("07", "07")]: digits only, each range ascending."""
    out = []
    for rng in group.split(","):
        lo, dash, hi = rng.strip().partition("-")
        hi = hi if dash else lo
        if parse_int(lo, strip=False) is None or parse_int(hi, strip=False) is None or len(lo) > 18 or len(hi) > 18:
            raise bad(f"{_cut(rng.strip())!r} is not a number or a range of numbers like 01-04")
        if int(hi) < int(lo):
            raise bad(f"the range {rng.strip()} runs backwards")
        out.append((lo, hi))
    return out


def _cut(text: str, most: int = 40) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def _expand(plan: list) -> list[str]:
    """Every host of one counted pattern: literals as they are, each range's numbers padded like its start."""
    hosts = [""]
    for piece in plan:
        if isinstance(piece, str):
            hosts = [h + piece for h in hosts]
        else:
            values = [f"{i:0{len(lo)}d}" for lo, hi in piece for i in range(int(lo), int(hi) + 1)]
            hosts = [h + v for h in hosts for v in values]
    return hosts


def read_node_file(path: str, limit: int | None = None) -> str:
    """A host file (PBS_NODEFILE, --hosts @FILE), at most MAX_NODE_FILE_BYTES read: a larger one is a
    UsageError naming it; an unreadable one an OSError (the caller says what it meant)."""
    limit = MAX_NODE_FILE_BYTES if limit is None else limit
    raw = read_regular(path, limit)  # a FIFO or device: an OSError before open(), not a hang
    if len(raw) > limit:
        raise UsageError(f"{path}: larger than {limit >> 20} MiB: not a host file")
    return raw.decode("utf-8", errors="replace")


def hosts_of_node_file(text: str, name: str, limit: int = MAX_NODES) -> list[str]:
    """The distinct hosts of a node file in order (it repeats a host once per slot); more than ``limit``
    distinct hosts is a UsageError naming the file (``name``)."""
    hosts: dict[str, None] = {}
    for line in text.splitlines():
        host = line.strip()
        if host and not host.startswith("#"):
            hosts[host.split()[0]] = None
            if len(hosts) > limit:
                raise UsageError(f"{name}: more than {limit} distinct hosts, the most ddpdoctor takes")
    return list(hosts)


def missing_hosts(hosts: list[str] | None, joined: list[str]) -> list[str]:
    """The launcher's hosts that did not join (compared by short name: node files mix FQDNs and names)."""
    if not hosts:
        return []
    came = {h.split(".")[0] for h in joined}
    return [h for h in hosts if h.split(".")[0] not in came]
