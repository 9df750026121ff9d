"""A plain gloo DDP job with its own short process-group timeout and one fault, for the forensics tests and the
flight-recorder comparison (tests/benchmarks/bench_fr_compare.py): `python job.py MODE`, with

- CULPRITS="1,2": the faulty rank(s); PG_TIMEOUT: the user's own init_process_group timeout (s, default 15);
- SLEEP_S: how long a `sleep` culprit stays in data loading (default 300: for good; less than PG_TIMEOUT: slow
  but legal);
- STALL_FILE: the culprit appends the wall-clock time its fault starts (time to verdict counts from it);
- FR_DUMPS=DIR (plain torchrun only): the dumps a user would arrange for torch's analyzer: every rank writes its
  flight record (pickle, as fr_trace reads it) into DIR/live/ when DIR/live.trigger appears (the hang is on),
  and into DIR/after/ as it ends (exit, exception, or the launcher's SIGTERM: a handler that then dies of it).

Modes: sleep (stuck in data loading), barrier (`if rank == 0: dist.barrier()`), dtype / shape (a metric
all_reduce of another dtype or size), stuck (the culprit freezes, SIGSTOP, inside an all_reduce every rank
entered), healthy.
"""
from __future__ import annotations

import textwrap

JOB = textwrap.dedent('''\
    import datetime, os, signal, sys, threading, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    MODE = sys.argv[1]
    CULPRITS = [int(r) for r in os.environ.get("CULPRITS", "1").split(",") if r]
    DUMPS = os.environ.get("FR_DUMPS")
    FAULT_STEP = 5


    def note_stall():
        if os.environ.get("STALL_FILE"):
            with open(os.environ["STALL_FILE"], "a") as fh:
                fh.write(f"{time.time()}\\n")


    def dump(kind):
        import torch._C._distributed_c10d as c10d
        folder = os.path.join(DUMPS, kind)
        os.makedirs(folder, exist_ok=True)
        rank = os.environ["RANK"]
        tmp = os.path.join(folder, f".part{rank}")
        with open(tmp, "wb") as fh:
            fh.write(c10d._dump_fr_trace())
        os.replace(tmp, os.path.join(folder, f"nccl_trace_rank_{rank}"))


    def arrange_dumps():
        import atexit

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


    def get_batch(rank, step):
        if MODE == "sleep" and rank in CULPRITS and step == FAULT_STEP:
            note_stall()
            time.sleep(float(os.environ.get("SLEEP_S", "300")))  # stuck in data loading
        return torch.randn(4, 16)


    def log_metric(rank, step, loss):
        t = loss.detach().reshape(1).repeat(16)
        if step == FAULT_STEP and rank in CULPRITS and MODE in ("dtype", "shape"):
            note_stall()
            t = t.double() if MODE == "dtype" else t[:8].contiguous()
        dist.all_reduce(t)  # the metric all_reduce


    def save_checkpoint(rank):
        if rank == 0:
            note_stall()
            dist.barrier()  # only rank 0: the others never come


    def freeze_inside_a_collective(rank):
        big = torch.ones(1 << 20)
        if rank in CULPRITS:
            note_stall()
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGSTOP)).start()
        else:
            time.sleep(1.0)  # the culprit enters first, and freezes there
        dist.all_reduce(big)


    def main():
        if DUMPS:
            arrange_dumps()
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "15"))))
        rank = dist.get_rank()
        model = DDP(torch.nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(int(os.environ.get("STEPS", "40"))):
            x = get_batch(rank, step)
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            log_metric(rank, step, loss)
            if MODE == "barrier" and step == FAULT_STEP:
                save_checkpoint(rank)
            if MODE == "stuck" and step == FAULT_STEP:
                freeze_inside_a_collective(rank)
            if MODE == "healthy" and step == FAULT_STEP and rank == 0:
                note_stall()  # no fault: the mark only tells the benchmark when to take the live dumps
            time.sleep(0.1)
        dist.destroy_process_group()


    main()
''')
LINE = {name: i + 1 for i, text in enumerate(JOB.splitlines()) for name, needle in (
    ("sleep", "# stuck in data loading"), ("barrier", "dist.barrier()  # only rank 0"),
    ("metric", "dist.all_reduce(t)  # the metric all_reduce"), ("backward", "loss.backward()"),
    ("freeze", "dist.all_reduce(big)")) if needle in text}
