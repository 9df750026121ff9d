"""The waits torch's libraries make on the user's behalf, as ONE table of frames -> waits: DDP's gradient
all_reduce inside loss.backward() (c10d's Reducer, from C++), FSDP2's all-gathers and reduce-scatters from its
hooks, torch.distributed.pipelining's P2POp batches, DTensor's redistributions, functional collectives (what
torch.compile'd code calls), and who drives them (Lightning's and Accelerate's training loops).

A stack whose innermost frames (those inside the user's innermost frame: the library's and native ones) match a
row waits in that row's collective, though no torch.distributed call of the user's is on it. Frames as every
source gives them, innermost first (``model.Frame``): Python frames (faulthandler's ``unshard``, py-spy's
``FSDPParamGroup.unshard``: matched on the last dotted part) and native frames as ``py-spy dump --native``
prints them (``c10d::Reducer::finalize_backward`` in ``libtorch_cpu.so``). Rows are tried in table order (the
more specific first); the judge reads the resulting ``Wait`` fields (``library``, ``phrase``), never a frame name.

Adding a library's wait: one ``Row`` below (and its recorded stack in tests/unit/forensics/data/library_stacks/).
Measured on torch 2.13 (gloo, CPU), lightning 2.6, accelerate 1.15: FORENSICS.md, "Waits inside the libraries".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import LibraryWait, WaitKind, is_library

__all__ = ["LibraryWait", "Row", "ROWS", "library_wait", "driver", "outside_handlers", "in_handler"]


@dataclass(frozen=True)
class Row:
    """One library wait (``kind`` set), or one library that drives waits (``kind`` None: Lightning, Accelerate).
    A frame matches when its function's last dotted part (or a native symbol's prefix, ``native``) is one of
    ``functions`` and its file contains one of ``files`` (any file when empty)."""
    library: str
    op: str
    phrase: str
    functions: tuple[str, ...]
    files: tuple[str, ...] = ()
    kind: WaitKind | None = WaitKind.COLLECTIVE
    native: bool = False        # ``functions`` are C++ symbol prefixes (py-spy --native)
    handler: bool = False       # a library's signal handler: what runs inside it is not where the rank stood
    certain: bool = True        # the frame proves the wait; else the rank may be computing there
    unless: str | None = None   # what else an uncertain frame may be

    def matches(self, function: str, file: str) -> bool:
        if self.files and not any(part in file for part in self.files):
            return False
        if self.native:
            return function.startswith(self.functions)
        return function.rsplit(".", 1)[-1] in self.functions


FSDP2 = ("torch/distributed/fsdp/_fully_shard/",)
PIPELINING = ("torch/distributed/pipelining/",)
DTENSOR = ("torch/distributed/tensor/",)
FUNCTIONAL = ("torch/distributed/_functional_collectives.py",)
DDP = ("torch/nn/parallel/distributed.py",)

ROWS: tuple[Row, ...] = (
    # torch.distributed.pipelining: a schedule's step waits for its P2POp batch (sends and receives of
    # activations and gradients); the stage's own forward/backward, when on the stack, is the user's code.
    Row("pipelining", "send/recv", "pipelining's send/recv of activations or gradients (a schedule's P2POp batch)",
        ("_wait_batch_p2p", "_batch_p2p", "_sorted_batch_p2p"), PIPELINING, WaitKind.P2P),
    Row("pipelining", "recv", "pipelining's receive of a stage's shapes (the stage's first step)",
        ("_shape_inference", "_prepare_forward_infra", "_prepare_backward_infra"), PIPELINING, WaitKind.P2P),
    # FSDP2 (fully_shard): parameters all-gathered before a layer's forward (and again before its backward),
    # gradients reduce-scattered after its backward; the root's final callback waits for the last ones.
    Row("FSDP2", "all_gather", "FSDP2's all_gather of a layer's parameters",
        ("foreach_all_gather", "unshard", "wait_for_unshard", "foreach_all_gather_copy_out", "_lazy_init"), FSDP2),
    Row("FSDP2", "reduce_scatter", "FSDP2's reduce_scatter of a layer's gradients after its backward",
        ("foreach_reduce", "post_backward", "_root_post_backward_final_callback", "finalize_backward",
         "wait_for_reduce_scatter"), FSDP2),
    # DTensor (tensor parallelism): a redistribution (Shard -> Replicate, Partial -> Replicate, ...) runs a
    # collective, through functional collectives.
    Row("DTensor", "redistribute", "DTensor's redistribution (a tensor-parallel collective)",
        ("redistribute_local_tensor", "_redistribute_local_tensor", "redistribute", "_reduce_value",
         "_reduce_shard_value", "_to_replicate_tensor", "_reduce_shard_tensor", "_to_new_shard_dim"), DTENSOR),
    # functional collectives: what DTensor and torch.compile'd code call; the wait is wait_tensor.
    Row("functional collectives", "wait_tensor",
        "the wait of a functional collective (DTensor's tensor parallelism, torch.compile'd code)",
        ("wait_tensor", "all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "all_to_all_single",
         "_maybe_wrap_tensor", "wait"), FUNCTIONAL),
    # DDP: the gradient all_reduce of every bucket runs inside backward from C++ (c10d's Reducer); the rank
    # waits for it in Reducer::finalize_backward (py-spy --native). Its constructor and forward sync too.
    Row("DDP", "all_reduce", "DDP's gradient all_reduce inside loss.backward()", ("c10d::Reducer::",),
        native=True),
    Row("DDP", "broadcast", "DDP's parameter check and broadcast at DDP(model)",
        ("__init__", "_sync_module_states", "_verify_param_shape_across_processes"), DDP),
    Row("DDP", "broadcast", "DDP's buffer broadcast before forward", ("_sync_buffers", "_sync_module_buffers",
        "_default_broadcast_coalesced", "_pre_forward", "_check_global_requires_backward_grad_sync"), DDP),
    # A torch.distributed Work's wait, reached from the user's own code (a hand-written batch_isend_irecv, an
    # async_op=True collective): only native frames show it. torch 2.15's nccl2 (its default "nccl") waits in
    # c10d::nccl2::WorkNCCL::wait, legacy NCCL in c10d::ProcessGroupNCCL::WorkNCCL::wait.
    Row("torch.distributed", "wait", "a torch.distributed Work.wait()", ("c10d::Work::wait",
        "c10d::ProcessGroupGloo::", "c10d::ProcessGroupNCCL::", "c10d::nccl2::", "gloo::"), native=True),
    # Python frames alone: inside the autograd engine, the rank waits in DDP's Reducer or computes its backward.
    Row("DDP", "all_reduce", "DDP's gradient all_reduce inside loss.backward()", ("_engine_run_backward",),
        ("torch/autograd/",), certain=False, unless="the backward's own compute"),
    # Who drives the wait (the user's line is then the trainer's call: trainer.fit, accelerator.backward).
    Row("Lightning", "", "from Lightning's training loop", ("*",), ("lightning/pytorch/", "pytorch_lightning/",
        "lightning/fabric/"), kind=None),
    Row("Accelerate", "", "from Accelerate", ("*",), ("/accelerate/",), kind=None),
    # Lightning's SIGTERM handler broadcasts the signal to the other ranks (dist.broadcast) from whatever frame
    # the signal interrupted: a rank stopped in its own code then shows a collective it never waited in.
    Row("Lightning", "", "Lightning's signal handler", ("_sigterm_notifier_fn", "_sigterm_handler_fn",
        "_slurm_sigusr_handler_fn", "__call__"), ("lightning/pytorch/trainer/connectors/signal_connector.py",
        "pytorch_lightning/trainer/connectors/signal_connector.py"), kind=None, handler=True),
)


def _inner(frames: Sequence) -> list:
    """The frames inside the user's innermost one: the libraries' and native ones it called (innermost first).
    A stack whose innermost frame is the user's own is in its own code, whatever library runs further out."""
    out = []
    for f in frames:
        if not is_library(f.file):
            break
        out.append(f)
    return out


def driver(frames: Sequence) -> Row | None:
    """The library that drives the stack's wait (Lightning's or Accelerate's loop), if any frame is its."""
    for row in ROWS:
        if row.kind is None and not row.handler and any(any(p in f.file for p in row.files) for f in _inner(frames)):
            return row
    return None


def outside_handlers(frames: Sequence) -> tuple:
    """The frames a library's signal handler interrupted (innermost first): those outer than the outermost
    handler frame; all of them when none is on the stack."""
    handlers = [i for i, f in enumerate(frames) for row in ROWS if row.handler and row.matches(f.function, f.file)]
    return tuple(frames[max(handlers) + 1:]) if handlers else tuple(frames)


def in_handler(frames: Sequence) -> bool:
    """A library's signal handler runs on the stack (the launcher's SIGTERM interrupted the rank)."""
    return len(outside_handlers(frames)) < len(frames)


def library_wait(frames: Sequence) -> LibraryWait | None:
    """The library wait a stack stands in (frames innermost first), or None: the first row of the table one of
    its inner frames matches, named with the library that drives it."""
    inner = _inner(frames)
    for row in ROWS:
        if row.kind is None:
            continue
        if any(row.matches(f.function, f.file) for f in inner):
            by = driver(frames)
            phrase = f"{row.phrase}, {by.phrase}" if by is not None else row.phrase
            return LibraryWait(row.library, row.op, phrase, row.kind, row.certain, by.library if by else None,
                               row.unless)
    return None
