"""Inside a rank: the sizes it passes to send/recv and all-to-all calls, kept where a crash leaves them.

Observed with sys.monitoring (Python 3.12+; older Pythons: nothing is observed): the start of torch's own
send, recv, isend, irecv, all_to_all_single and all_to_all is seen, their arguments read, nothing replaced
(a wrapper around dist.send broke every pipelining schedule, issue 37). Only those functions' code is
instrumented, so nothing else in the job slows. Each call goes into a file mapped into memory
(evidence/call_sizes.py: the format): the kernel keeps what was written when gloo aborts the process right
after. A failing observation is dropped silently: forensics never change the job.
"""
from __future__ import annotations

import itertools
import json
import mmap
import os
import sys
import time

from ..forensics.evidence import call_sizes

# sys.monitoring's tool ids 0, 1, 2 and 5 are named for debuggers, coverage, profilers and optimizers: a free one
# of the others, so a debugger or coverage run beside the job keeps its own.
TOOL_IDS = (3, 4)
WATCHED = {"send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "all_to_all_single": "a2a_single",
           "all_to_all": "a2a_list"}
WHERE_DEPTH = 40  # frames walked out of torch to the script's own line
PLACES = 4096  # call sites remembered


class Watch:
    """The mapped file and the per-channel counters of one rank."""

    def __init__(self, c10d, mapped: mmap.mmap, torch_dir: str) -> None:
        self.c10d = c10d
        self.mapped = mapped
        self.torch_dir = torch_dir
        self.seq = itertools.count()
        self.channels: dict[tuple, int] = {}
        self.places: dict[tuple, str] = {}

    def keep(self, record: dict) -> None:
        n = next(self.seq)
        record["n"] = n
        self.put(n, call_sizes.encode(record))

    def put(self, n: int, raw: bytes | None) -> None:
        if raw is not None and len(raw) <= call_sizes.SLOT:
            offset = (n % call_sizes.SLOTS) * call_sizes.SLOT
            self.mapped[offset:offset + len(raw)] = raw

    def number(self, key: tuple) -> int:
        k = self.channels.get(key, 0)
        self.channels[key] = k + 1
        return k

    def group_ranks(self, group) -> list[int] | None:
        if group is None or group is self.c10d.GroupMember.WORLD:
            return None
        return list(self.c10d.get_process_group_ranks(group))

    def where(self, frame) -> str:
        """The script's own line that led to the call, as JSON text (cached: a step calls from the same lines)."""
        for _ in range(WHERE_DEPTH):
            frame = frame.f_back
            if frame is None:
                return "null"
            code = frame.f_code
            if not code.co_filename.startswith(self.torch_dir):
                key = (code, frame.f_lineno)
                text = self.places.get(key)
                if text is None:
                    text = json.dumps(f"{code.co_filename}:{frame.f_lineno}")
                    if len(self.places) < PLACES:
                        self.places[key] = text
                return text
        return "null"

    def p2p(self, op: str, frame) -> None:
        args = frame.f_locals
        group, tensor = args.get("group"), args.get("tensor")
        peer = args.get("dst" if op == "send" else "src")
        local_peer = args.get("group_dst" if op == "send" else "group_src")
        if peer is None and local_peer is not None and group is not None:
            peer = self.c10d.get_global_rank(group, local_peer)
        if peer is None or tensor is None:
            return  # a receive from any source: no peer to pair it with
        ranks, peer = self.group_ranks(group), int(peer)
        k, n = self.number((op, peer, _key(ranks))), next(self.seq)
        # JSON written by hand on the path every pipeline step takes: a third of json.dumps' cost
        self.put(n, (f'{{"n":{n},"op":"{op}","group":{_ints(ranks)},"peer":{peer},"k":{k},"bytes":[{tensor.nbytes}],'
                     f'"shape":[{_ints(tensor.shape)}],"dtype":"{_dtype(tensor)}","where":{self.where(frame)},'
                     f'"t":{time.time()!r}}}\0').encode())

    def a2a_single(self, frame) -> None:
        args = frame.f_locals
        out, inp, group = args.get("output"), args.get("input"), args.get("group")
        if out is None or inp is None:
            return
        ranks = self.group_ranks(group)
        size = len(ranks) if ranks is not None else self.c10d.GroupMember.WORLD.size()
        ins, outs = args.get("input_split_sizes"), args.get("output_split_sizes")
        k, n = self.number(("all_to_all", _key(ranks))), next(self.seq)
        self.put(n, (f'{{"n":{n},"op":"all_to_all","group":{_ints(ranks)},"k":{k},'
                     f'"bytes":{_ints(_split_bytes(inp, ins, size))},"expects":{_ints(_split_bytes(out, outs, size))},'
                     f'"shape":[{_ints(inp.shape)},{_ints(out.shape)}],"dtype":"{_dtype(inp)}",'
                     f'"splits":[{_ints(ins or None)},{_ints(outs or None)}],"where":{self.where(frame)},'
                     f'"t":{time.time()!r}}}\0').encode())

    def a2a_list(self, frame) -> None:
        args = frame.f_locals
        outs, ins, group = args.get("output_tensor_list"), args.get("input_tensor_list"), args.get("group")
        if not outs or not ins:
            return
        ranks = self.group_ranks(group)
        self.keep({"op": "all_to_all", "group": ranks, "k": self.number(("all_to_all", _key(ranks))),
                   "bytes": [int(t.nbytes) for t in ins], "expects": [int(t.nbytes) for t in outs],
                   "shape": [[list(t.shape) for t in ins], [list(t.shape) for t in outs]], "dtype": _dtype(ins[0]),
                   "where": json.loads(self.where(frame)), "t": time.time()})


def _key(ranks: list[int] | None) -> tuple | None:
    return tuple(ranks) if ranks is not None else None


def _ints(values) -> str:
    return "null" if values is None else "[" + ",".join(str(int(v)) for v in values) + "]"


def _dtype(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _split_bytes(tensor, splits, size: int) -> list[int]:
    """Bytes to (or from) each member: the splits count rows of dim 0; none given: the tensor cut evenly."""
    total = int(tensor.nbytes)
    if not splits:
        return [total // size] * size
    rows = int(tensor.shape[0]) if tensor.dim() else 1
    row = total // rows if rows else 0
    return [int(s) * row for s in splits]


def start(folder: str, rank: str) -> bool:
    """Watch this rank's calls into folder/rank<R>.calls. False where it cannot (Python < 3.12, no tool id
    free, no torch.distributed, the file not writable): the job runs exactly as without."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return False
    tool = next((t for t in TOOL_IDS if monitoring.get_tool(t) is None), None)
    if tool is None:
        return False
    import torch
    import torch.distributed.distributed_c10d as c10d

    watch = Watch(c10d, _mapped(folder, rank), os.path.dirname(torch.__file__) + os.sep)
    handlers = {}
    for name, kind in WATCHED.items():
        fn = getattr(c10d, name, None)
        code = getattr(_unwrapped(fn), "__code__", None)
        if code is not None:
            handlers[code] = kind
    if not handlers:
        return False
    monitoring.use_tool_id(tool, "ddpdoctor")

    def on_start(code, offset):
        kind = handlers.get(code)
        if kind is None:
            return
        try:
            frame = sys._getframe(1)  # the watched function's own frame, its arguments bound
            if kind in ("send", "recv"):
                watch.p2p(kind, frame)
            elif kind == "a2a_single":
                watch.a2a_single(frame)
            else:
                watch.a2a_list(frame)
        except Exception:  # noqa: BLE001 - an observation that fails is dropped; the call goes on
            pass

    monitoring.register_callback(tool, monitoring.events.PY_START, on_start)
    for code in handlers:
        monitoring.set_local_events(tool, code, monitoring.events.PY_START)
    _KEEP.append(watch)
    return True


def _unwrapped(fn):
    """torch's collectives are wrapped by its c10d logger (functools.wraps): the wrapper's code is shared by
    all of them, the wrapped function's is each one's own."""
    seen = 0
    while fn is not None and hasattr(fn, "__wrapped__") and seen < 8:
        fn, seen = fn.__wrapped__, seen + 1
    return fn


def _mapped(folder: str, rank: str) -> mmap.mmap:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, call_sizes.file_name(rank))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.ftruncate(fd, call_sizes.SLOTS * call_sizes.SLOT)
        return mmap.mmap(fd, call_sizes.SLOTS * call_sizes.SLOT)
    finally:
        os.close(fd)  # the mapping keeps the file


_KEEP: list = []  # the watch lives as long as the process
