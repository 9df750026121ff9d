"""The collectives as small descriptors, like nccl-tests' per-collective files: bytes moved, bus factor, data.

Definitions follow nccl-tests doc/PERFORMANCE.md (``*GetBw`` in src/<coll>.cu): algbw = S / t with GB = 1e9
and S the bytes of the op's defining buffer; busbw = algbw × factor(n). A requested size is S; ``count`` is
the per-call element count nccl-tests prints (per rank for all_gather/reduce_scatter, per peer for all_to_all).

Check data are small integers, exact in every dtype including bfloat16, so a correct result equals the
expected tensor bit for bit and ``#wrong`` counts differing elements.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

DTYPES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
          "int32": 4, "int": 4, "int64": 8, "int8": 1, "uint8": 1}


def allreduce_factor(n: int) -> float:
    return 2 * (n - 1) / n


def gather_factor(n: int) -> float:
    return (n - 1) / n


def one(n: int) -> float:
    return 1.0


@dataclass(frozen=True)
class Op:
    """One collective, like one nccl-tests source file (testColl): its bytes, bus factor, buffers, data,
    expected result and the call itself. Each collective below overrides what differs."""

    name: str
    bus_factor: Callable[[int], float]
    whole_buffer: bool  # S counts every rank's chunk (all_gather, reduce_scatter, all_to_all)
    forms: tuple[str, ...]  # which of "out_of_place"/"in_place" torch offers for this op
    redop: str = "none"
    root: int = -1
    min_ranks: int = 1

    def count(self, size: int, elsize: int, n: int) -> int:
        """nccl-tests' count column for a requested S (rounded down so the buffer splits evenly)."""
        return size // (elsize * n) if self.whole_buffer else size // elsize

    def bytes_moved(self, count: int, elsize: int, n: int) -> int:
        return count * elsize * (n if self.whole_buffer else 1)

    # -- torch from here on: called with a Buffers (count c, rank r, size n, device, dtype) --------------
    def shapes(self, c: int, n: int) -> tuple[int, int]:
        """Element counts of the input and output buffers."""
        return c, c

    def fill(self, b: "Buffers") -> None:
        b.inp.copy_(_pattern(b.count, b.rank + 1, b.device, b.dtype))

    def expected(self, b: "Buffers"):
        raise NotImplementedError

    def result(self, b: "Buffers", inplace: bool):
        return b.out

    def call(self, b: "Buffers", inplace: bool, group):
        """Start the op; returns a work object (not waited on)."""
        raise NotImplementedError


class AllReduce(Op):
    def expected(self, b):
        import torch

        n = b.n
        return (torch.arange(b.count, device=b.device, dtype=torch.int64) % 7 * n + n * (n + 1) // 2).to(b.dtype)

    def result(self, b, inplace):
        return b.inp

    def call(self, b, inplace, group):
        import torch.distributed as dist

        return dist.all_reduce(b.inp, group=group, async_op=True)


class AllGather(Op):
    def shapes(self, c, n):
        return c, c * n

    def fill(self, b):
        super().fill(b)
        b.out[b.mine].copy_(b.inp)  # the in-place form's input is this rank's slice of the output

    def expected(self, b):
        import torch

        return torch.cat([_pattern(b.count, j + 1, b.device, b.dtype) for j in range(b.n)])

    def call(self, b, inplace, group):
        return _all_gather(b.out, b.out[b.mine] if inplace else b.inp, group=group, async_op=True)


class ReduceScatter(Op):
    def shapes(self, c, n):
        return c * n, c

    def fill(self, b):
        b.inp.copy_(_pattern(b.count * b.n, b.rank + 1, b.device, b.dtype))

    def expected(self, b):
        import torch

        idx = torch.arange(b.rank * b.count, (b.rank + 1) * b.count, device=b.device, dtype=torch.int64)
        return (idx % 7 * b.n + b.n * (b.n + 1) // 2).to(b.dtype)

    def result(self, b, inplace):
        return b.inp[b.mine] if inplace else b.out

    def call(self, b, inplace, group):
        return _reduce_scatter(b.inp[b.mine] if inplace else b.out, b.inp, group=group, async_op=True)


class Broadcast(Op):
    def fill(self, b):
        import torch

        b.inp.copy_(_pattern(b.count, 1, b.device, b.dtype) if b.rank == self.root else
                    torch.full((b.count,), -1, device=b.device, dtype=b.dtype))

    def expected(self, b):
        return _pattern(b.count, 1, b.device, b.dtype)

    def result(self, b, inplace):
        return b.inp

    def call(self, b, inplace, group):
        import torch.distributed as dist

        return dist.broadcast(b.inp, src=_global(self.root, group), group=group, async_op=True)


class AllToAll(Op):
    def shapes(self, c, n):
        return c * n, c * n

    def fill(self, b):
        import torch

        # chunk j goes to rank j: its values encode (source, destination), so a misrouted chunk is wrong
        b.inp.copy_(torch.cat([_pattern(b.count, (b.rank * b.n + j) % 64, b.device, b.dtype, 3) for j in range(b.n)]))

    def expected(self, b):
        import torch

        return torch.cat([_pattern(b.count, (j * b.n + b.rank) % 64, b.device, b.dtype, 3) for j in range(b.n)])

    def call(self, b, inplace, group):
        import torch.distributed as dist

        return dist.all_to_all_single(b.out, b.inp, group=group, async_op=True)


class SendRecv(Op):
    """A ring of paired isend/irecv: each rank sends to the next and receives from the previous."""

    def expected(self, b):
        return _pattern(b.count, (b.rank - 1) % b.n + 1, b.device, b.dtype)

    def call(self, b, inplace, group):
        import torch.distributed as dist

        to, frm = _global((b.rank + 1) % b.n, group), _global((b.rank - 1) % b.n, group)
        return _All(dist.batch_isend_irecv([dist.P2POp(dist.isend, b.inp, to, group),
                                            dist.P2POp(dist.irecv, b.out, frm, group)]))


BOTH = ("out_of_place", "in_place")
# torch.distributed's all_reduce and broadcast exist only in place (an "out-of-place" form would be a copy
# plus the op, which measures the copy too); all_to_all_single and send/recv only out of place.
OPS: dict[str, Op] = {
    "all_reduce": AllReduce("all_reduce", allreduce_factor, False, ("in_place",), redop="sum"),
    "all_gather": AllGather("all_gather", gather_factor, True, BOTH),
    "reduce_scatter": ReduceScatter("reduce_scatter", gather_factor, True, BOTH, redop="sum"),
    "broadcast": Broadcast("broadcast", one, False, ("in_place",), root=0),
    "all_to_all": AllToAll("all_to_all", gather_factor, True, ("out_of_place",)),
    "sendrecv": SendRecv("sendrecv", one, False, ("out_of_place",), min_ranks=2),
}


def unmeasurable(op_names: list[str], sizes: list[int], dtype: str, n: int) -> list[str]:
    """Why an op would measure nothing at all with these sizes and ``n`` ranks (every size under one element,
    or one element per rank; too few ranks): the harness skips such a row, and a sweep of nothing alone would
    print an empty table and "0 OK"."""
    elsize, why = DTYPES[dtype], []
    for name in op_names:
        op = OPS[name]
        if n < op.min_ranks:
            why.append(f"{name} needs at least {op.min_ranks} ranks (this run has {n})")
        elif op.count(max(sizes), elsize, n) == 0:
            least = elsize * (n if op.whole_buffer else 1)
            per = f"one {dtype} element per rank, {n} ranks" if op.whole_buffer else f"one {dtype} element"
            why.append(f"{name} needs -e/--max-bytes of at least {least} B ({per}), not {max(sizes)} B")
    return why


def algbw_gbs(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_gbs(op: str, nbytes: int, seconds: float, n: int) -> float:
    """Bus bandwidth in GB/s, exactly as nccl-tests computes it."""
    return algbw_gbs(nbytes, seconds) * OPS[op].bus_factor(n)


# ---------------------------------------------------------------- data, run, expected (torch from here on)
def _pattern(count: int, offset: int, device, dtype, modulus: int = 7):
    import torch

    return (torch.arange(count, device=device, dtype=torch.int64) % modulus + offset).to(dtype)


class Buffers:
    """Input/output tensors of one op at one size; the op itself says how to fill, check and run them."""

    def __init__(self, op: Op, count: int, rank: int, n: int, device, dtype):
        import torch

        self.op, self.count, self.rank, self.n, self.device, self.dtype = op, count, rank, n, device, dtype
        self.mine = slice(rank * count, (rank + 1) * count)
        n_in, n_out = op.shapes(count, n)
        self.inp = torch.empty(n_in, device=device, dtype=dtype)
        self.out = torch.empty(n_out, device=device, dtype=dtype)

    def fill(self) -> None:
        self.out.fill_(-1)
        self.op.fill(self)

    def expected(self):
        return self.op.expected(self)

    def result(self, inplace: bool):
        return self.op.result(self, inplace)

    def wrong(self, inplace: bool) -> int:
        return int((self.result(inplace) != self.expected()).sum().item())

    def start(self, inplace: bool, group=None):
        """One op; returns without waiting (the harness synchronises)."""
        return self.op.call(self, inplace, group)


def _global(group_rank: int, group) -> int:
    import torch.distributed as dist

    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _all_gather(out, inp, **kw):
    """torch 2.13 renamed all_gather_into_tensor to all_gather_single; use whichever this torch has."""
    import torch.distributed as dist

    return getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, inp, **kw)


def _reduce_scatter(out, inp, **kw):
    import torch.distributed as dist

    return getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, inp, **kw)


class _All:
    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()

