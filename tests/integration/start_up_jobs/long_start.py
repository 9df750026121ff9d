"""A healthy DDP job (gloo) with a long phase of start-up work after it has trained a few steps, as real ones have
(a lazy import on first use, an op built on first use, a compile or recompile), then trains on; with MODE ending
in "+hang", rank 1 then stops in its own code while rank 0 waits in all_reduce.

MODE: "compile": torch.compile with a cold cache (TORCHINDUCTOR_CACHE_DIR fresh): rank 0 compiles (the C++
compiler is its child) while rank 1 waits on the compile lock rank 0 holds, as inductor's own lock does;
"import": rank 0 imports a module that takes IMPORT_S seconds of CPU while rank 1 waits in a barrier;
"build": rank 0 builds an op with a compiler child (cc, IMPORT_S seconds) holding a file lock rank 1 waits on,
as cpp_extension's build lock does;
"compute": every rank computes IMPORT_S seconds of CPU in its own code (a dataset index, a tokenizer, a checkpoint
transform done in the user's code: no rank waits, issue 53);
"compute0": rank 0 computes so while rank 1 waits in a barrier (a job waiting on a busy rank, issue 53);
"download0": rank 0 downloads a file from DOWNLOAD_URL (a hub over a slow link: HF's main_process_first) into
START_UP_DIR while rank 1 waits in a barrier: its stack stands in one read for seconds and it uses almost no CPU,
only its bytes move;
"fetch0": the same download read into memory, nothing written (a dataset's index fetched with urllib or requests,
an object store's client): its bytes move through its socket only;
"subprocess0": rank 0 runs an evaluation as a Python subprocess computing IMPORT_S seconds of CPU while rank 1 waits
in a barrier (rank 0 itself sits in subprocess.run, using nothing);
"loader0": one batch of rank 0's DataLoader takes IMPORT_S seconds of CPU in its worker (a heavy augmentation)
while rank 1 waits in DDP's all_reduce; rank 0's main process waits on the workers' queue."""
import datetime
import fcntl
import os
import subprocess
import sys
import time
import urllib.request

import torch
import torch.distributed as dist

MODE = sys.argv[1]
WORK = os.environ["START_UP_DIR"]
SECONDS = float(os.environ.get("IMPORT_S", "20"))


def slow_import():
    path = os.path.join(WORK, "slow_module_r0.py")
    with open(path, "w") as fh:  # a module whose top level computes for SECONDS (a big import, a table built)
        fh.write(f"import time\nend = time.process_time() + {SECONDS}\nx = 0\n"
                 "while time.process_time() < end:\n    x += 1\n")
    sys.path.insert(0, WORK)
    import slow_module_r0  # noqa: F401


def own_compute():
    end = time.process_time() + SECONDS  # CPU in the job's own code, its line changing as it goes
    x = 0
    while time.process_time() < end:
        x += 1
    return x


def download():
    with urllib.request.urlopen(os.environ["DOWNLOAD_URL"], timeout=60) as r, \
            open(os.path.join(WORK, "model.bin"), "wb") as out:
        while chunk := r.read(1 << 16):
            out.write(chunk)


def fetch():
    open(os.path.join(WORK, "fetching"), "w").close()
    with urllib.request.urlopen(os.environ["DOWNLOAD_URL"], timeout=60) as r:
        index = r.read()  # one call, the whole body into memory
    print(f"rank 0 fetched {len(index)} bytes", flush=True)


def build_with_lock(rank):
    lock = open(os.path.join(WORK, "build.lock"), "w")
    if rank == 0:
        fcntl.flock(lock, fcntl.LOCK_EX)
        src = os.path.join(WORK, "op.c")
        with open(src, "w") as fh:  # the op "compiled": cc spins for SECONDS of CPU
            fh.write("#include <time.h>\nint main(void){volatile unsigned long x=0; clock_t end=clock()+"
                     f"(clock_t)({SECONDS}*CLOCKS_PER_SEC); while(clock()<end) x++; return 0;}}\n")
        subprocess.run(["cc", "-O0", "-o", os.path.join(WORK, "op"), src], check=True)
        subprocess.run([os.path.join(WORK, "op")], check=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
    else:
        time.sleep(1.0)
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for rank 0's build, as every other rank does
        fcntl.flock(lock, fcntl.LOCK_UN)


class SlowBatch(torch.utils.data.Dataset):
    """Eight samples; on rank 0 the fifth costs SECONDS of CPU in the DataLoader's worker."""

    def __init__(self, rank):
        self.rank = rank

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if self.rank == 0 and i == 4:
            own_compute()
        return torch.randn(64)


class Net(torch.nn.Module):
    """Enough distinct ops that inductor writes and compiles several C++ kernels (a cold cache: tens of seconds)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)
        self.norm = torch.nn.LayerNorm(128)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(self.a(x)))
        h = h * torch.sigmoid(h).softmax(-1) + torch.tanh(h).cumsum(-1) / 128
        return self.b(h).log_softmax(-1)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net())  # broadcasts: the watchdog arms
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def steps(n):
        for _ in range(n):
            x = torch.randn(16, 64)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    steps(3)  # the job has moved: no start-up grace is left to hide the long phase below
    kind = MODE.split("+")[0]
    if kind == "import":
        if rank == 0:
            slow_import()
        dist.barrier()
    elif kind == "build":
        build_with_lock(rank)
    elif kind == "compile":
        model = torch.compile(model)
    elif kind == "subprocess0":
        if rank == 0:
            subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + " + str(SECONDS) +
                            "\nwhile time.process_time() < end:\n    pass\n"], check=True)
        dist.barrier()
    elif kind == "loader0":
        for x in torch.utils.data.DataLoader(SlowBatch(rank), batch_size=1, num_workers=2):
            loss = model(x.expand(16, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    elif kind == "download0":
        if rank == 0:
            download()
        dist.barrier()
    elif kind == "fetch0":
        if rank == 0:
            fetch()
        dist.barrier()
    elif kind.startswith("compute"):
        for _ in range(3):  # steps the watchdog sees after it armed: past start-up, no grace hides what follows
            time.sleep(1.2)
            steps(1)
        if kind == "compute" or rank == 0:
            own_compute()
        dist.barrier()
    steps(5)
    if MODE.endswith("+hang"):
        if rank == 1:
            time.sleep(3600)  # stuck in its own code: the hang to name
        dist.all_reduce(torch.ones(4))
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
