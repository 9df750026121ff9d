"""The one movement and threshold policy (judge/policy.py, issue 53), table-tested: what one rank did between two
samples, and what that makes of the job. No rank waits: computing, never a hang. Some wait while another works in
its own code (CPU, a moving stack): waiting on a busy rank, not stopped by the hang threshold. Start-up work or a
helper's CPU: moved. Some rank waits and nothing moves: hung; a spin inside a wait is waiting, not work."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddpdoctor.forensics.evidence.model import Frame, Wait, WaitKind
from ddpdoctor.forensics.evidence.stacks import wait_of
from ddpdoctor.forensics.judge import policy
from ddpdoctor.forensics.judge.policy import Activity, JobMotion, Sample, activity, job_motion

SCRIPT = "/job/train.py"
SITE = "/venv/lib/python3.11/site-packages"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"


def frames(*where: tuple[str, int, str]) -> tuple[Frame, ...]:
    return tuple(Frame(f, line, fn) for f, line, fn in where) + (Frame(SCRIPT, 70, "<module>"),)


def sample(fs: tuple[Frame, ...], cpu: float | None, helpers: dict | None = None, io: int | None = None,
           children: dict | None = None, tcp: dict | None = None) -> Sample:
    return Sample(fs, cpu, helpers or {}, wait_of(fs) if fs else None, io, children or {}, tcp or {})


OWN_22, OWN_23 = frames((SCRIPT, 22, "own_compute")), frames((SCRIPT, 23, "own_compute"))
ASLEEP = frames(("/usr/lib/python3.11/threading.py", 320, "wait"), (SCRIPT, 22, "load_batch"))
ALL_REDUCE = frames((C10D, 2800, "all_reduce"), (SCRIPT, 50, "step"))
BARRIER = frames((C10D, 4800, "barrier"), (SCRIPT, 14, "main"))
IMPORTING = frames(("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed"), (SCRIPT, 12, "setup"))
COMPILING = frames((f"{SITE}/torch/_inductor/codecache.py", 2100, "load"), (SCRIPT, 30, "forward"))
SUBPROCESS = frames(("/usr/lib/python3.11/subprocess.py", 1264, "wait"), (SCRIPT, 40, "build"))
LOAD_A = frames((f"{SITE}/transformers/modeling_utils.py", 3000, "from_pretrained"), (SCRIPT, 20, "main"))
DOWNLOAD = frames(("/usr/lib/python3.11/socket.py", 720, "readinto"), (SCRIPT, 12, "fetch_checkpoint"))
EVAL_CHILD = frames(("/usr/lib/python3.11/subprocess.py", 2053, "_try_wait"), (SCRIPT, 10, "evaluate"))
LOADER_QUEUE = frames(("/usr/lib/python3.11/multiprocessing/connection.py", 1136, "wait"),
                      ("/usr/lib/python3.11/multiprocessing/queues.py", 113, "get"),
                      (f"{SITE}/torch/utils/data/dataloader.py", 1133, "_try_get_data"), (SCRIPT, 18, "train"))
LOAD_B = frames((f"{SITE}/transformers/modeling_utils.py", 3050, "from_pretrained"), (SCRIPT, 20, "main"))

# (case, before, after, activity)
RANKS = [
    ("a compiler child using the CPU", sample(SUBPROCESS, 3.0, {900: 1.0}), sample(SUBPROCESS, 3.0, {900: 2.2}),
     Activity.STARTING),
    ("a new helper that worked", sample(SUBPROCESS, 3.0, {900: 1.0}), sample(SUBPROCESS, 3.0, {900: 1.0, 901: 0.4}),
     Activity.STARTING),
    ("an idle helper, the rank blocked on it", sample(SUBPROCESS, 3.0, {900: 1.0}),
     sample(SUBPROCESS, 3.0, {900: 1.0}), Activity.IDLE),
    ("an import using the CPU on the same line", sample(IMPORTING, 1.0), sample(IMPORTING, 2.0), Activity.STARTING),
    ("a compile using the CPU", sample(COMPILING, 1.0), sample(COMPILING, 1.5), Activity.STARTING),
    ("in a compile, no CPU", sample(COMPILING, 1.0), sample(COMPILING, 1.0), Activity.IDLE),
    ("a stack moving inside a library", sample(LOAD_A, 1.0), sample(LOAD_B, 1.0), Activity.WORKING),
    ("its own code using the CPU (a long step)", sample(OWN_22, 1.0), sample(OWN_22, 9.0), Activity.WORKING),
    ("its own code, its stack moving", sample(OWN_22, 1.0), sample(OWN_23, 1.0), Activity.WORKING),
    ("asleep in its own code", sample(ASLEEP, 1.0), sample(ASLEEP, 1.0), Activity.IDLE),
    ("in a collective", sample(ALL_REDUCE, 1.0), sample(ALL_REDUCE, 1.0), Activity.WAITING),
    ("spinning inside a collective (NCCL's host thread)", sample(ALL_REDUCE, 1.0), sample(ALL_REDUCE, 3.0),
     Activity.WAITING),
    ("in a barrier", sample(BARRIER, 1.0), sample(BARRIER, 1.0), Activity.WAITING),
    ("nothing answered", sample((), None), sample((), None), Activity.UNKNOWN),
    ("no stack, its CPU growing", sample((), 1.0), sample((), 2.0), Activity.WORKING),
    # a download or a checkpoint written to slow storage: one read()/write() holds the stack and uses no CPU for
    # seconds, the bytes move (before the I/O rule: idle, and a job waiting on it was stopped as hung)
    ("rank 0 downloads while rank 1 waits: its bytes move, its CPU and stack do not",
     sample(DOWNLOAD, 1.0, io=10_000_000), sample(DOWNLOAD, 1.01, io=10_300_000), Activity.WORKING),
    ("a stack dump's bytes are no work", sample(ASLEEP, 1.0, io=5_000), sample(ASLEEP, 1.0, io=8_000), Activity.IDLE),
    ("in a collective, its transport's bytes moving", sample(ALL_REDUCE, 1.0, io=0),
     sample(ALL_REDUCE, 1.0, io=4_000_000), Activity.WAITING),
    ("no stack, its bytes moving", sample((), 1.0, io=0), sample((), 1.0, io=1_000_000), Activity.WORKING),
    # rank 0 runs an evaluation harness as a Python subprocess while the others wait (a Python child is no
    # helper: its CPU counts only while the rank waits for it)
    ("waits for its Python subprocess, which computes", sample(EVAL_CHILD, 1.0, children={900: 1.0}),
     sample(EVAL_CHILD, 1.0, children={900: 2.4}), Activity.WORKING),
    ("waits for its Python subprocess, which is idle", sample(EVAL_CHILD, 1.0, children={900: 1.0}),
     sample(EVAL_CHILD, 1.0, children={900: 1.01}), Activity.IDLE),
    ("waits on its DataLoader's queue while a worker computes", sample(LOADER_QUEUE, 1.0, children={901: 3.0}),
     sample(LOADER_QUEUE, 1.0, children={901: 4.4}), Activity.WORKING),
    ("waits on its DataLoader's queue, its workers stuck", sample(LOADER_QUEUE, 1.0, children={901: 3.0}),
     sample(LOADER_QUEUE, 1.0, children={901: 3.0}), Activity.IDLE),
    ("asleep in its own code while a Python child of its computes (a metrics service)",
     sample(ASLEEP, 1.0, children={900: 1.0}), sample(ASLEEP, 1.0, children={900: 2.0}), Activity.IDLE),
    ("its bytes not readable", sample(ASLEEP, 1.0, io=None), sample(ASLEEP, 1.0, io=9_000_000), Activity.IDLE),
    # a download into memory (urllib's read(), requests' .content, an object store's client): recv() moves no
    # /proc/PID/io counter, its TCP socket's bytes do (before them: idle, and the job waiting on it stopped)
    ("rank 0 reads a download into memory: its socket's bytes move",
     sample(DOWNLOAD, 1.0, io=0, tcp={77: 1_000_000}), sample(DOWNLOAD, 1.0, io=0, tcp={77: 1_300_000}),
     Activity.WORKING),
    ("a connection opened between the samples brings all its bytes", sample(DOWNLOAD, 1.0, io=0, tcp={77: 900_000}),
     sample(DOWNLOAD, 1.0, io=0, tcp={78: 300_000}), Activity.WORKING),
    ("asleep in its own code, its sockets still (a peer's gloo connection)",
     sample(ASLEEP, 1.0, io=0, tcp={77: 4_000_000}), sample(ASLEEP, 1.0, io=0, tcp={77: 4_000_000}), Activity.IDLE),
    ("in a collective, its transport's socket moving", sample(ALL_REDUCE, 1.0, io=0, tcp={77: 0}),
     sample(ALL_REDUCE, 1.0, io=0, tcp={77: 8_000_000}), Activity.WAITING),
]


@pytest.mark.parametrize("case,before,after,expected", RANKS, ids=[r[0] for r in RANKS])
def test_what_one_rank_did(case, before, after, expected):
    assert activity(before, after) is expected, case


W, B, I, S, U = Activity.WAITING, Activity.WORKING, Activity.IDLE, Activity.STARTING, Activity.UNKNOWN
# (case, activities, progressed, motion, the hang threshold may stop it)
JOBS = [
    ("every rank computes in its own code (a dataset index after DDP's constructor)", {0: B, 1: B}, False,
     JobMotion.COMPUTING, False),
    ("every rank asleep in its own code, none waits", {0: I, 1: I}, False, JobMotion.COMPUTING, False),
    ("rank 0 works while rank 1 waits in a barrier", {0: B, 1: W}, False, JobMotion.WAITING_ON_BUSY, False),
    ("rank 1 asleep in its own code while rank 0 waits", {0: W, 1: I}, False, JobMotion.HUNG, True),
    ("every rank waits, none moves", {0: W, 1: W}, False, JobMotion.HUNG, True),
    ("rank 0 compiles while rank 1 waits on its lock", {0: S, 1: W}, False, JobMotion.MOVED, False),
    ("a collective completed", {0: W, 1: I}, True, JobMotion.MOVED, False),
    ("nothing read", {0: U, 1: U}, False, JobMotion.UNKNOWN, False),
    ("one rank read, waiting; the other not read", {0: W, 1: U}, False, JobMotion.HUNG, True),
]


@pytest.mark.parametrize("case,acts,progressed,expected,stoppable", JOBS, ids=[j[0] for j in JOBS])
def test_what_the_job_does(case, acts, progressed, expected, stoppable):
    reading = job_motion(acts, progressed)
    assert reading.motion is expected and reading.stoppable is stoppable, case


def test_waiting_on_a_busy_rank_names_who_waits_and_who_works():
    reading = job_motion({0: B, 1: W, 2: W})
    assert reading.waiting == (1, 2) and reading.busy == (0,)


def test_a_library_wait_the_frames_do_not_prove_is_work_while_the_rank_uses_the_cpu():
    from ddpdoctor.forensics.evidence.library_waits import LibraryWait

    backward = LibraryWait("DDP", "all_reduce", "inside loss.backward()", WaitKind.COLLECTIVE, certain=False)
    wait = Wait(WaitKind.COLLECTIVE, library=backward)
    assert policy.waits(wait, busy=False) and not policy.waits(wait, busy=True)
    assert policy.waits(Wait(WaitKind.COLLECTIVE), busy=True)  # torch's own frame: a spin inside it still waits
    assert not policy.waits(Wait(WaitKind.NONE), busy=False)


def test_rank_0_downloading_while_rank_1_waits_is_waiting_on_a_busy_rank_not_a_hang():
    before = {0: sample(DOWNLOAD, 1.0, io=0), 1: sample(BARRIER, 1.0, io=0)}
    after = {0: sample(DOWNLOAD, 1.0, io=policy.IO_MOVES_BYTES), 1: sample(BARRIER, 1.0, io=0)}
    reading = policy.reading_of(before, after)
    assert reading.motion is JobMotion.WAITING_ON_BUSY and reading.busy == (0,) and not reading.stoppable
    after[0] = sample(DOWNLOAD, 1.0, io=policy.IO_MOVES_BYTES - 1)  # under the bar: the download stalled
    assert policy.reading_of(before, after).motion is JobMotion.HUNG


INIT = frames((C10D, 1700, "init_process_group"), (SCRIPT, 8, "main"))
DDP_BROADCAST = frames((f"{SITE}/torch/distributed/utils.py", 326, "_sync_params_and_buffers"),
                       (f"{SITE}/torch/nn/parallel/distributed.py", 1066, "__init__"), (SCRIPT, 9, "main"))


@pytest.mark.parametrize("case, before, after, moved", [
    ("out of init_process_group into DDP's broadcast", INIT, DDP_BROADCAST, True),
    ("out of a barrier into its own code", BARRIER, OWN_22, True),
    ("from its own code into a barrier", OWN_22, BARRIER, True),
    ("in the same barrier", BARRIER, BARRIER, False),
    ("its own code moving, no wait on either side", OWN_22, OWN_23, False),
    ("a stack not read on one side", (), BARRIER, False),
])
def test_a_rank_moved_through_a_wait(case, before, after, moved):
    assert policy.through_a_wait(sample(before, 1.0), sample(after, 1.0)) is moved, case


def test_ranks_that_met_during_the_window_moved_though_both_samples_find_them_waiting():
    """Under load, --hang-timeout 5: node 0's ranks waited in init_process_group for node 1's (still importing
    torch) when the threshold fired; during the window they met and entered DDP's broadcast. Both samples find
    every rank of node 0 in a wait, and no CPU: they moved through one, so the job moved."""
    before = {0: sample(INIT, 1.0), 1: sample(INIT, 1.0)}
    after = {0: sample(DDP_BROADCAST, 1.0), 1: sample(DDP_BROADCAST, 1.0)}
    assert policy.reading_of(before, after).motion is JobMotion.MOVED
    assert policy.reading_of(before, before).motion is JobMotion.HUNG  # still in init: nothing moved
    assert policy.reading_of(before, before, progressed=True).motion is JobMotion.MOVED  # a record moved


def test_attachs_rate_of_bytes_is_the_live_rules_bar_over_its_window():
    bar = policy.IO_MOVES_BYTES / policy.MOVEMENT_WINDOW_S
    assert policy.io_rate_works(bar) and not policy.io_rate_works(bar * 0.9) and not policy.io_rate_works(None)


def test_thresholds_come_from_the_policy():
    assert policy.calibrated_s(1.0) == policy.HANG_FLOOR_S
    assert policy.calibrated_s(100.0) == policy.HANG_FACTOR * 100.0
    assert policy.grace_s(None) == policy.START_UP_GRACE_S and policy.grace_s(100.0) == 200.0


POLICY_NAMES = {"CPU_MOVES_S", "IO_MOVES_BYTES", "BUSY_SHARE", "IMPORTING", "CHILD_WAITS", "START_UP_WORK", "HANG_FLOOR_S", "HANG_FACTOR",
                "HANG_WARMUP", "START_UP_GRACE_S", "MOVEMENT_WINDOW_S", "STALLED_S", "OVERDUE_FACTOR",
                "OVERDUE_MIN_GAPS", "OVERDUE_FLOOR_S", "BUSY_CPU"}


def test_each_constant_of_the_policy_is_defined_once_in_the_package():
    """No module but judge/policy.py assigns a policy constant (a second CPU_MOVES_S or IMPORTING drifted apart
    before), and no module sets its own hang floor, factor or grace as a bare number beside it."""
    package = Path(__import__("ddpdoctor").__file__).parent
    found = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id in POLICY_NAMES:
                    found.setdefault(t.id, []).append(str(path.relative_to(package)))
    assert all(paths == ["forensics/judge/policy.py"] for paths in found.values()), found
    assert set(found) == POLICY_NAMES - {"BUSY_CPU"}
