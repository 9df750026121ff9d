"""When a rank moved: the one rule for "the job is doing something" before anything says it hangs.

Between two samples a rank moved when:
- a helper it started used the CPU: a process under it that is not a Python interpreter (the C++ compiler
  torch.compile and DeepSpeed's op builder run, ninja, a linker): a rank whose work is done by a child uses
  almost no CPU itself;
- it does start-up work and uses the CPU: its stack stands in an import (``<frozen importlib._bootstrap>``) or in
  a library's compile, build or load (torch._inductor, torch._dynamo, cpp_extension, DeepSpeed's op builder,
  torch.load), however long that takes;
- its stack moved inside a library's code (the innermost frame a library's in both samples, the stacks
  different) while it waits in nothing: building a model, loading weights, a tokenizer's setup.
A rank in its own code moves by none of these, whatever line it stands on (a rank spinning or sleeping there is no
progress of the job), nor does a rank that waits (a collective, a store, a file lock another rank holds): it
waits for the one that moves.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .model import Frame, WaitKind
from .stacks import main_thread, wait_of

# CPU seconds between two samples that count as work (a rank blocked in a wait or a lock uses ~0)
CPU_MOVES_S = 0.05
IMPORTING = ("<frozen importlib._bootstrap", "importlib/__init__.py")
# Library code whose work is start-up: compiling, building an extension, loading a checkpoint
START_UP_WORK = ("torch/_inductor/", "torch/_dynamo/", "torch/utils/cpp_extension.py", "op_builder/",
                 "torch/serialization.py", "safetensors/", "triton/")


@dataclass
class Sample:
    """One rank at one moment: its main thread's frames (innermost first), its own CPU seconds, and the CPU
    seconds of its helpers (descendants that are not Python interpreters), by pid."""
    frames: tuple[Frame, ...] = ()
    cpu_s: float | None = None
    helpers_cpu_s: dict[int, float] = field(default_factory=dict)


def helpers_moved(before: Sample, after: Sample) -> bool:
    """A helper (a compiler, a build) used the CPU between the samples, or a new one started."""
    used = sum(max(0.0, t - before.helpers_cpu_s.get(pid, 0.0)) for pid, t in after.helpers_cpu_s.items())
    return used >= CPU_MOVES_S


def start_up_work(frames: tuple[Frame, ...]) -> bool:
    """The stack stands in an import or in a library's compile, build or load."""
    return any(any(p in f.file for p in IMPORTING + START_UP_WORK) for f in frames)


def _cpu_used(before: Sample, after: Sample) -> float:
    if before.cpu_s is None or after.cpu_s is None:
        return 0.0
    return max(0.0, after.cpu_s - before.cpu_s)


def moved(before: Sample, after: Sample) -> bool:
    """The rule above, for one rank between two samples."""
    if helpers_moved(before, after):
        return True
    if not after.frames or wait_of(after.frames).kind != WaitKind.NONE:
        return False
    working = _cpu_used(before, after) >= CPU_MOVES_S
    if working and start_up_work(after.frames):
        return True
    in_library = bool(before.frames) and before.frames[0].library and after.frames[0].library
    return in_library and before.frames != after.frames and (working or start_up_work(before.frames))


def sample_of(stacks: str | None, cpu_s: float | None, helpers: dict[int, float]) -> Sample:
    return Sample(main_thread(stacks), cpu_s, dict(helpers))


def python_like(name: str, argv0: str) -> bool:
    """A descendant that runs Python (a DataLoader's worker, a multiprocessing child): its work is the rank's
    own kind, not a helper's."""
    return "python" in (name or "").lower() or "python" in (argv0 or "").lower()
