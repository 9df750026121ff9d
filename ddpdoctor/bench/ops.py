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


BOTH = ("out_of_place", "in_place")
# torch.distributed's all_reduce and broadcast exist only in place (an "out-of-place" form would be a copy
# plus the op, which measures the copy too); all_to_all_single and send/recv only out of place.
OPS: dict[str, Op] = {
    "all_reduce": Op("all_reduce", allreduce_factor, False, ("in_place",), redop="sum"),
    "all_gather": Op("all_gather", gather_factor, True, BOTH),
    "reduce_scatter": Op("reduce_scatter", gather_factor, True, BOTH, redop="sum"),
    "broadcast": Op("broadcast", one, False, ("in_place",), root=0),
    "all_to_all": Op("all_to_all", gather_factor, True, ("out_of_place",)),
    "sendrecv": Op("sendrecv", one, False, ("out_of_place",), min_ranks=2),
}


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
    """Input/output tensors of one op at one size, with the fill and the expected result for a check."""

    def __init__(self, op: Op, count: int, rank: int, n: int, device, dtype):
        import torch

        self.op, self.count, self.rank, self.n, self.device, self.dtype = op, count, rank, n, device, dtype
        c = count
        if op.name == "all_gather":
            self.inp, self.out = torch.empty(c, device=device, dtype=dtype), torch.empty(c * n, device=device, dtype=dtype)
        elif op.name == "reduce_scatter":
            self.inp, self.out = torch.empty(c * n, device=device, dtype=dtype), torch.empty(c, device=device, dtype=dtype)
        elif op.name == "all_to_all":
            self.inp, self.out = torch.empty(c * n, device=device, dtype=dtype), torch.empty(c * n, device=device, dtype=dtype)
        else:
            self.inp, self.out = torch.empty(c, device=device, dtype=dtype), torch.empty(c, device=device, dtype=dtype)

    def fill(self) -> None:
        import torch

        op, c, r, n = self.op.name, self.count, self.rank, self.n
        if op == "all_to_all":
            # chunk j goes to rank j: value encodes (source, destination) so a misrouted chunk is wrong
            self.inp.copy_(torch.cat([_pattern(c, (r * n + j) % 64, self.device, self.dtype, 3) for j in range(n)]))
        elif op == "broadcast":
            self.inp.copy_(_pattern(c, 1, self.device, self.dtype) if r == self.op.root else
                           torch.full((c,), -1, device=self.device, dtype=self.dtype))
        elif op == "reduce_scatter":
            self.inp.copy_(_pattern(c * n, r + 1, self.device, self.dtype))
        else:
            self.inp.copy_(_pattern(c, r + 1, self.device, self.dtype))
        self.out.fill_(-1)
        if op == "all_gather":  # the in-place form's input is this rank's slice of the output
            self.out[r * c:(r + 1) * c].copy_(self.inp)

    def expected(self):
        import torch

        op, c, r, n = self.op.name, self.count, self.rank, self.n
        if op == "all_reduce":
            return (torch.arange(c, device=self.device, dtype=torch.int64) % 7 * n + n * (n + 1) // 2).to(self.dtype)
        if op == "reduce_scatter":
            idx = torch.arange(r * c, (r + 1) * c, device=self.device, dtype=torch.int64)
            return (idx % 7 * n + n * (n + 1) // 2).to(self.dtype)
        if op == "all_gather":
            return torch.cat([_pattern(c, j + 1, self.device, self.dtype) for j in range(n)])
        if op == "broadcast":
            return _pattern(c, 1, self.device, self.dtype)
        if op == "all_to_all":
            return torch.cat([_pattern(c, (j * n + r) % 64, self.device, self.dtype, 3) for j in range(n)])
        if op == "sendrecv":
            return _pattern(c, (r - 1) % n + 1, self.device, self.dtype)
        raise KeyError(op)

    def result(self, inplace: bool):
        if self.op.name in ("all_reduce", "broadcast"):
            return self.inp
        if inplace and self.op.name == "reduce_scatter":
            return self.inp[self.rank * self.count:(self.rank + 1) * self.count]
        return self.out

    def wrong(self, inplace: bool) -> int:
        got = self.result(inplace)
        return int((got != self.expected()).sum().item())

    def launch(self, inplace: bool, group=None):
        """One op; returns without waiting (the harness synchronises)."""
        import torch.distributed as dist

        op = self.op.name
        mine = slice(self.rank * self.count, (self.rank + 1) * self.count)
        if op == "all_reduce":
            return dist.all_reduce(self.inp, group=group, async_op=True)
        if op == "broadcast":
            return dist.broadcast(self.inp, src=self._global(self.op.root, group), group=group, async_op=True)
        if op == "all_gather":
            src = self.out[mine] if inplace else self.inp
            return _all_gather(self.out, src, group=group, async_op=True)
        if op == "reduce_scatter":
            dst = self.inp[mine] if inplace else self.out
            return _reduce_scatter(dst, self.inp, group=group, async_op=True)
        if op == "all_to_all":
            return dist.all_to_all_single(self.out, self.inp, group=group, async_op=True)
        if op == "sendrecv":
            peer_to = (self.rank + 1) % self.n
            peer_from = (self.rank - 1) % self.n
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, self.inp, self._global(peer_to, group), group),
                dist.P2POp(dist.irecv, self.out, self._global(peer_from, group), group),
            ])
            return _All(reqs)
        raise KeyError(op)

    @staticmethod
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

