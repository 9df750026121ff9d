"""The words of a rank's own failure: each shape judge/classify.py's rules can find (``Shape``), the ``Category`` it
belongs to and its fix, in one table (``WORDS``). A fix that names what the records hold (the program, the C++
type, the place, the signal) is a template ``fix_of`` fills. A new failure shape: a value here, its words entry,
its rule in classify.py."""
from __future__ import annotations

from enum import Enum

from .outcome import Category


class Shape(str, Enum):
    LAUNCHER_ENV = "launcher_env"        # started without torchrun's variables
    WRONG_DEVICE = "wrong_device"        # invalid device ordinal: RANK used where LOCAL_RANK belongs
    OOM = "oom"
    CUDA_ERROR = "cuda_error"
    DESYNC = "desync"
    TIMEOUT = "timeout"
    NCCL = "nccl"
    CONNECT = "connect"                  # gloo's mesh refused while the ranks met
    RESTART_CONNECT = "restart_connect"  # the same on a restarted attempt: torch's restart
    PEER_LOST = "peer_lost"              # its collective broke because a peer died
    STOPPED = "stopped"                  # KeyboardInterrupt, SystemExit: stopped after another failure
    LAUNCHER_STOP = "launcher_stop"      # SIGINT/SIGTERM from the launcher after another rank failed
    USAGE = "usage"                      # its argument parser refused its arguments
    ABORTED = "aborted"                  # an uncaught C++ exception, then SIGABRT
    SIGKILL = "sigkill"
    SIGNAL = "signal"                    # another signal ended it
    EXCEPTION_AT = "exception_at"        # its own exception, raised at a place of its own code
    EXCEPTION = "exception"              # its own exception, no place of its own code


NOTHING_TO_FIX = "nothing to fix on this rank: see the root cause"

WORDS: dict[Shape, tuple[Category, str]] = {
    Shape.LAUNCHER_ENV: (Category.LAUNCHER_ENV, "launch with torchrun (or `ddpdoctor run-trainer`), which sets RANK, "
                                                "WORLD_SIZE, MASTER_ADDR and MASTER_PORT"),
    Shape.WRONG_DEVICE: (Category.CUDA, "use LOCAL_RANK, not RANK, for the device: "
                                        "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"),
    Shape.OOM: (Category.OOM, "reduce the micro-batch size (raise gradient accumulation to keep the global batch), or "
                              "use activation checkpointing"),
    Shape.CUDA_ERROR: (Category.CUDA, "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; check `ddpdoctor "
                                      "preflight --only gpu,gpu-health` on that host"),
    Shape.DESYNC: (Category.DESYNC, "the ranks called different collectives (or other shapes or dtypes) at the same "
                                    "point: make every rank issue the same collectives in the same order with the same "
                                    "shapes (TORCH_DISTRIBUTED_DEBUG=DETAIL names both)"),
    Shape.TIMEOUT: (Category.TIMEOUT, "a rank stopped participating in a collective: rerun under `ddpdoctor "
                                      "run-trainer` (it collects every rank's stack before your process group's "
                                      "timeout expires) to get the rank behind; raise the process-group timeout only "
                                      "if the work is legitimately slow"),
    Shape.NCCL: (Category.NCCL, "run `ddpdoctor preflight` across the nodes and `ddpdoctor nccl-bench`; rerun with "
                                "NCCL_DEBUG=INFO for the first NCCL WARN"),
    Shape.CONNECT: (Category.CONNECT, "gloo could not connect the ranks to each other (a connection refused while they "
                                      "met): check that GLOO_SOCKET_IFNAME names an interface every node reaches and "
                                      "that no firewall blocks the ports (`ddpdoctor preflight` across the nodes)"),
    Shape.RESTART_CONNECT: (Category.RESTART_CONNECT, "nothing in your script failed on this attempt: torch's gloo "
                                                      "could not connect the restarted ranks to each other (a "
                                                      "connection refused while they met again); rerun the job "
                                                      "(--resume RUN_ID continues from its snapshot) and fix the "
                                                      "failure of the attempt before, which made the restart"),
    Shape.PEER_LOST: (Category.PEER_LOST, NOTHING_TO_FIX),
    Shape.STOPPED: (Category.STOPPED, NOTHING_TO_FIX),
    Shape.LAUNCHER_STOP: (Category.SIGNAL, NOTHING_TO_FIX),
    Shape.USAGE: (Category.EXCEPTION, "{prog} rejected its command-line arguments: correct them (its usage is in this "
                                      "rank's log)"),
    Shape.ABORTED: (Category.SIGNAL, "the process aborted on an uncaught C++ {type}{at}: see its what() message"),
    Shape.SIGKILL: (Category.SIGNAL, "killed with SIGKILL: usually the kernel OOM killer or the scheduler; check "
                                     "`dmesg | grep -i -e oom -e killed` and the job's memory limit, lower the batch "
                                     "size or the DataLoader workers"),
    Shape.SIGNAL: (Category.SIGNAL, "the process died of {signal}: its stderr log above shows the last Python stack "
                                    "(PYTHONFAULTHANDLER)"),
    Shape.EXCEPTION_AT: (Category.EXCEPTION, "{what} raised at {location} ended this rank: correct the code there (the "
                                             "traceback shows how it got there)"),
    Shape.EXCEPTION: (Category.EXCEPTION, "{what} ended this rank: its traceback shows where"),
}


def category_of(shape: Shape) -> str:
    return WORDS[shape][0].value


def fix_of(shape: Shape, **fields: str) -> str:
    """The shape's fix, its fields filled from the rank's records (str.format: a value's own braces stay as they
    are)."""
    return WORDS[shape][1].format(**fields)
