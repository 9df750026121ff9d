"""The one movement rule (evidence/movement.py, issue 45 item 2): before the watchdog stops anything, a rank that
moved means the job is doing something. Moved: a helper (a compiler) used the CPU; start-up work (an import, a
compile, an op build, torch.load) used it; the stack moved inside a library while waiting in nothing. Not moved:
a rank in its own code whatever its line (a spin is no progress), a rank that waits (a collective, a lock)."""
from __future__ import annotations

from ddpdoctor.forensics.evidence.model import Frame
from ddpdoctor.forensics.evidence.movement import Sample, moved

SCRIPT = "/job/train.py"
SITE = "/venv/lib/python3.11/site-packages"


def frames(*where: tuple[str, int, str]) -> tuple[Frame, ...]:
    return tuple(Frame(f, line, fn) for f, line, fn in where) + (Frame(SCRIPT, 70, "<module>"),)


def test_a_compiler_child_using_the_cpu_is_movement_while_the_rank_itself_waits_on_it():
    waiting = frames(("/usr/lib/python3.11/subprocess.py", 1264, "wait"), (SCRIPT, 40, "build"))
    before = Sample(waiting, cpu_s=3.0, helpers_cpu_s={900: 1.0})
    assert moved(before, Sample(waiting, cpu_s=3.0, helpers_cpu_s={900: 2.2}))
    assert moved(before, Sample(waiting, cpu_s=3.0, helpers_cpu_s={900: 1.0, 901: 0.4}))  # a new helper worked
    assert not moved(before, Sample(waiting, cpu_s=3.0, helpers_cpu_s={900: 1.0}))  # an idle helper: no


def test_an_import_or_a_compile_using_the_cpu_is_movement_even_on_the_same_line():
    importing = frames(("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed"), (SCRIPT, 12, "setup"))
    assert moved(Sample(importing, 1.0), Sample(importing, 2.0))
    compiling = frames((f"{SITE}/torch/_inductor/codecache.py", 2100, "load"), (SCRIPT, 30, "forward"))
    assert moved(Sample(compiling, 1.0), Sample(compiling, 1.5))
    assert not moved(Sample(compiling, 1.0), Sample(compiling, 1.0))  # waiting in it, no CPU: no


def test_a_stack_moving_inside_a_library_is_movement():
    a = frames((f"{SITE}/transformers/modeling_utils.py", 3000, "from_pretrained"), (SCRIPT, 20, "main"))
    b = frames((f"{SITE}/transformers/modeling_utils.py", 3050, "from_pretrained"), (SCRIPT, 20, "main"))
    assert moved(Sample(a, 1.0), Sample(b, 1.4))


def test_a_rank_spinning_in_its_own_code_or_waiting_is_not_movement():
    spin1, spin2 = frames((SCRIPT, 22, "own_compute")), frames((SCRIPT, 23, "own_compute"))
    assert not moved(Sample(spin1, 1.0), Sample(spin2, 9.0))  # a busy loop: the hang to name
    collective = frames((f"{SITE}/torch/distributed/distributed_c10d.py", 2800, "all_reduce"), (SCRIPT, 50, "step"))
    assert not moved(Sample(collective, 1.0), Sample(collective, 1.0))
    assert not moved(Sample((), None), Sample((), None))  # nothing answered: nothing shown


def test_attach_takes_a_rank_doing_start_up_work_for_movement_as_the_watchdog_does():
    """One movement rule for attach and the watchdog: a rank that computes inside an import or a compile while the
    others wait is the job moving (attach said "a long step, or a hang" and watched up to --wait for it)."""
    from ddpdoctor.forensics.attach.decide import Motion, motion
    from ddpdoctor.forensics.attach.sample import RankRead
    from ddpdoctor.forensics.evidence.model import RankState, Source, Wait, WaitKind

    importing = frames(("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed"), (SCRIPT, 12, "setup"))
    barrier = frames((f"{SITE}/torch/distributed/distributed_c10d.py", 4800, "barrier"), (SCRIPT, 14, "main"))
    reads = [RankRead(0, 100, "h", 0, state=RankState(0, Source.PY_SPY, frames=importing), moved=False, cpu=0.9),
             RankRead(1, 101, "h", 1, state=RankState(1, Source.PY_SPY, frames=barrier,
                                                      wait=Wait(WaitKind.COLLECTIVE)), moved=False, cpu=0.0)]
    reading = motion(reads)
    assert reading.motion == Motion.MOVED and "start-up work" in reading.why, reading
    spinning = frames((SCRIPT, 22, "own_compute"))
    reads[0] = RankRead(0, 100, "h", 0, state=RankState(0, Source.PY_SPY, frames=spinning), moved=False, cpu=0.9)
    assert motion(reads).motion == Motion.UNDECIDED  # its own code: a long step or a hang, watched as before
