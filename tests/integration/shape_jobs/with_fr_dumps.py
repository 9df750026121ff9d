"""Run a shape script unchanged, with the flight-recorder dumps a user arranges for torch's analyzer (fr_trace):
`python with_fr_dumps.py SCRIPT.py ARGS` under plain torchrun, with FR_DUMPS=DIR and TORCH_FR_BUFFER_SIZE set.
Every rank writes its flight record (pickle, as fr_trace reads it) into DIR/live/ when DIR/live.trigger appears
(the hang is on), and into DIR/after/ as it ends (exit, exception, or the launcher's SIGTERM: a handler that
then dies of it), as tests/integration/fr_job.py does inside its own script. Used by
tests/benchmarks/bench_fr_compare.py only; a rank that is SIGKILLed or aborted by gloo leaves no dump."""
import atexit
import os
import runpy
import signal
import sys
import threading
import time

DUMPS = os.environ["FR_DUMPS"]


def dump(kind):
    import torch._C._distributed_c10d as c10d

    folder = os.path.join(DUMPS, kind)
    os.makedirs(folder, exist_ok=True)
    rank = os.environ["RANK"]
    tmp = os.path.join(folder, f".part{rank}")
    with open(tmp, "wb") as fh:
        fh.write(c10d._dump_fr_trace())
    os.replace(tmp, os.path.join(folder, f"nccl_trace_rank_{rank}"))


def live():
    while not os.path.exists(os.path.join(DUMPS, "live.trigger")):
        time.sleep(0.1)
    dump("live")


def on_term(signum, frame):
    dump("after")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=live, daemon=True).start()
atexit.register(dump, "after")
signal.signal(signal.SIGTERM, on_term)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
