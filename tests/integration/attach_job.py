"""A job for tests/integration/test_attach*.py: gloo, a 30-minute process-group timeout, a shape chosen by
ATTACH_SHAPE; under torchrun, or under srun alone (the rank from SLURM_PROCID). Each rank writes ready<rank> in
ATTACH_DIR when it reaches the place the test reads it at.

`ddp`: DistributedDataParallel (its gradient all_reduce inside loss.backward(), from C++): rank 1 first takes
one long step (ATTACH_LONG_S seconds of CPU in its own code, before its backward: rank 0 waits in DDP's
Reducer meanwhile; long<rank> marks its start), then hangs before the backward of a later step (sleeping, as a
stuck data loader or a deadlock would), where every other rank waits in DDP's Reducer (ready<rank>).

ready<rank> holds the rank's pid (a test kills it from outside, as the OOM killer would). With
ATTACH_DUMP_ON_SIGTERM=1 each rank writes its flight record to $TORCH_FR_DUMP_TEMP_FILE<rank> (torch's naming) when
a scheduler's SIGTERM reaches it, as a user arranges for `ddpdoctor postmortem --fr-dir`, then dies of the signal."""
import os
import signal
import threading


def dump_on_sigterm():
    """A thread waits for SIGTERM (blocked in every thread, so none dies of it first): a rank blocked inside a
    gloo collective never returns to Python, where a signal handler would run. Called before torch starts any
    thread, which inherits the mask."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait():
        signal.sigwait({signal.SIGTERM})
        path = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + os.environ["RANK"]
        with open(path + ".part", "wb") as fh:
            fh.write(dump_fr())
        os.replace(path + ".part", path)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)  # the default action, here: the rank dies of the signal

    threading.Thread(target=wait, daemon=True).start()


if os.environ.get("ATTACH_DUMP_ON_SIGTERM"):
    dump_on_sigterm()

import datetime  # noqa: E402  (after the signal mask: torch's threads inherit it)
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def dump_fr() -> bytes:
    """torch's flight record, pickled, as its TORCH_FR_DUMP_TEMP_FILE dump holds it."""
    import torch._C._distributed_c10d as c10d

    return c10d._dump_fr_trace()


def ready(rank):
    Path(os.environ["ATTACH_DIR"], f"ready{rank}").write_text(str(os.getpid()))


def own_compute(seconds):
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.5)


def spin(seconds):
    end = time.time() + seconds
    x = 0
    while time.time() < end:
        x += 1  # CPU in the rank's own code: a long step
    return x


def ddp(rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100000):
        loss = model(torch.randn(8, 16)).sum()
        if rank == 1 and step == 3:
            Path(os.environ["ATTACH_DIR"], f"long{rank}").write_text("1")
            spin(float(os.environ.get("ATTACH_LONG_S", "10")))
        if step == 6:
            ready(rank)
            if rank == 1:
                own_compute(3600)
        loss.backward()  # DDP's gradient all_reduce
        opt.step()
        opt.zero_grad()


def main():
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:  # started by srun itself, as many scripts are
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    rank, shape = dist.get_rank(), os.environ["ATTACH_SHAPE"]
    if shape == "ddp":
        return ddp(rank)
    t = torch.ones(8)
    dist.all_reduce(t)
    if os.environ.get("ATTACH_DUMP_ON_SIGTERM"):
        # torch 2.13's first dump of a record with entries imports sympy (4 s here, more on a loaded machine: past a
        # scheduler's KillWait, its SIGKILL came first): once now, so the dump at the stop is instant
        dump_fr()
    ready(rank)
    if shape == "stuck":
        if rank == 1:
            own_compute(3600)
        dist.all_reduce(t)
    elif shape == "desync":
        if rank == 2:
            dist.broadcast(t, 0)
        else:
            dist.all_reduce(t)
    elif shape == "healthy":
        end = time.time() + 600
        while time.time() < end:
            dist.all_reduce(t)
            time.sleep(0.02)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
