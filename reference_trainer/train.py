"""The reference DDP trainer: a tiny GPT on a generated corpus, meant to be read top to bottom.

Run alone (`python -m ddpdoctor_trainer.train`) it trains on one process; under torchrun (or
`ddpdoctor run-trainer`) it detects RANK/WORLD_SIZE/LOCAL_RANK and trains with DDP. Every place where the
ranks synchronise has a comment saying why. Snapshots (model, optimizer, scheduler, step, RNG) are written
by global rank 0, atomically, and picked up automatically after a restart.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import hashlib
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from .data import CharWindows, load_tokens, prepare
from .faults import MODES, maybe_fail
from .model import GPT, GPTConfig, param_count


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="ddpdoctor's reference DDP trainer (tiny GPT, generated corpus)")
    p.add_argument("--run-dir", default="ddpdoctor-run", help="snapshots, metrics and stacks go here")
    p.add_argument("--data-dir", default=None, help="the generated corpus (default: RUN_DIR/data)")
    p.add_argument("--resume-from", default=None,
                   help="an earlier run's snapshot to start from (this run's own snapshot, after a restart, wins)")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps in total (across restarts)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per micro-batch per rank")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--snapshot-every", type=int, default=20)
    p.add_argument("--checksum-every", type=int, default=50, help="compare parameter checksums across ranks")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--collective-timeout", type=float, default=300.0, help="seconds before a collective gives up")
    p.add_argument("--fail-at-step", type=int, default=None)
    p.add_argument("--fail-rank", type=int, default=0)
    p.add_argument("--fail-mode", choices=MODES, default="exception")
    p.add_argument("--fail-attempt", type=int, default=0, help="inject only on this restart attempt")
    p.add_argument("--fail-exit-s", type=float, default=0.0,
                   help="the failing rank's exit handlers then take this long (a logger's upload after a crash)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.grad_accum < 1:
        p.error("--steps, --batch-size and --grad-accum must be positive")
    return args


STOP = {"requested": False}


def _on_sigterm(signum, frame) -> None:
    STOP["requested"] = True  # acted on at the next step boundary, where every rank can agree to stop


def save_snapshot(path: Path, state: dict) -> None:
    """Atomic: write a temp file, fsync it, rename over the old snapshot, fsync the directory. A failed write
    (a full disk) leaves no temp file behind; a SIGKILL mid-write does, and run-trainer removes it."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def param_digest(model: torch.nn.Module) -> int:
    """A 63-bit digest of every parameter's bytes: equal on every rank if DDP kept them in sync."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().numpy().tobytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@record  # writes this rank's exception to TORCHELASTIC_ERROR_FILE, which ddpdoctor's post-mortem reads
def main(argv=None) -> None:
    args = parse_args(argv)

    # ---- who am I: DDP is detected from the launcher's environment, never configured by hand
    ddp = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)  # LOCAL_RANK, not RANK: ranks on other nodes count from 0 too
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if ddp:
        init_distributed("nccl" if device.type == "cuda" else "gloo", rank, world,
                         datetime.timedelta(seconds=args.collective_timeout), attempt)

    run_dir = Path(args.run_dir)
    for sub in ("metrics", "stacks", "snapshots"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    # `kill -USR1 <pid>` (ddpdoctor's hang watchdog does it) dumps every thread's Python stack to this file.
    stack_file = open(run_dir / "stacks" / f"rank{rank}.txt", "w")  # noqa: SIM115 - open for the process lifetime
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    metrics = open(run_dir / "metrics" / f"rank{rank}.jsonl", "a", buffering=1)  # noqa: SIM115

    # ---- data: prepared once per node by local rank 0
    data_dir = Path(args.data_dir) if args.data_dir else run_dir / "data"
    if local_rank == 0:
        prepare(data_dir)
    if ddp:
        dist.barrier()  # sync: the other local ranks read the corpus local rank 0 has just written
    tokens = load_tokens(prepare(data_dir))
    dataset = CharWindows(tokens, args.block_size)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps_per_epoch = max(1, len(loader) // args.grad_accum)

    # ---- model, optimizer, schedule; resume from the last snapshot if there is one
    torch.manual_seed(args.seed)
    cfg = GPTConfig(vocab_size=128, block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                    n_embd=args.n_embd)
    model = GPT(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
    snapshot = run_dir / "snapshots" / "latest.pt"
    step = 0
    # This run's own snapshot (a restart inside the job) before the earlier run --resume-from names.
    source = snapshot if snapshot.exists() else Path(args.resume_from) if args.resume_from else None
    if source is not None:
        step = load_snapshot(source, model, optimizer, scheduler, device)
        if rank == 0:
            print(f"resumed from {source} at step {step} (attempt {attempt})", flush=True)
            if source != snapshot and attempt == 0:
                (run_dir / "resumed.json").write_text(json.dumps({"snapshot": str(source), "step": step}))
    # DDP broadcasts rank 0's parameters at construction (a sync), so every rank starts identical.
    net = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None) if ddp else model
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    if rank == 0:
        print(f"training {param_count(model) / 1e6:.2f}M parameters on {world} rank(s), {device.type}, "
              f"{steps_per_epoch} steps/epoch", flush=True)

    # ---- the loop
    def batches():
        epoch = step // steps_per_epoch
        skip = (step % steps_per_epoch) * args.grad_accum  # resume mid-epoch on the exact next batch
        while True:
            sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
            for i, batch in enumerate(loader):
                if i >= skip:
                    yield batch
            skip = 0
            epoch += 1

    stream = batches()
    tokens_per_step = args.batch_size * args.block_size * args.grad_accum
    while step < args.steps:
        maybe_fail(step + 1, rank, args)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(args.grad_accum):
            x, y = (t.to(device, non_blocking=True) for t in next(stream))
            last = micro == args.grad_accum - 1
            # DDP all-reduces gradients during backward; skip that sync on all but the last micro-batch.
            ctx = net.no_sync() if ddp and not last else contextlib.nullcontext()
            with ctx:
                with autocast:
                    _, loss = net(x, y)
                (loss / args.grad_accum).backward()
            total += loss.item() / args.grad_accum
        optimizer.step()
        scheduler.step()
        if device.type == "cuda":
            torch.cuda.synchronize()  # so the step time below is the GPU's, not the launch queue's
        step += 1
        dt = time.perf_counter() - t0
        metrics.write(json.dumps({"step": step, "loss": round(total, 5), "tokens_per_s": round(tokens_per_step / dt, 1),
                                  "step_time_s": round(dt, 5), "peak_mem_bytes": peak_memory_bytes(device),
                                  "attempt": attempt, "rank": rank, "time": time.time()}) + "\n")
        if rank == 0 and step % args.log_every == 0:
            print(f"step {step}: loss {total:.4f}, {tokens_per_step / dt:.0f} tokens/s on rank 0", flush=True)
        if rank == 0 and step % args.snapshot_every == 0:
            save_snapshot(snapshot, _state(model, optimizer, scheduler, step))
        if step % args.checksum_every == 0 or step == args.steps:
            compare_checksums(model, step, rank, world, ddp, device, run_dir)
        if ddp:
            # Every rank must agree to stop at the same step, or the ones that go on wait for the others forever.
            flag = torch.tensor([1.0 if STOP["requested"] else 0.0], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = flag.item() > 0
        else:
            stop = STOP["requested"]
        if stop:
            if rank == 0:
                save_snapshot(snapshot, _state(model, optimizer, scheduler, step))
                print(f"SIGTERM: snapshot saved at step {step}, exiting cleanly", flush=True)
            break

    if rank == 0 and not STOP["requested"]:
        save_snapshot(snapshot, _state(model, optimizer, scheduler, step))
        (run_dir / "DONE").write_text(json.dumps({"step": step, "world_size": world}))
    if ddp:
        dist.barrier()  # sync: nobody tears the process group down while a peer still talks through it
        dist.destroy_process_group()
        _STORE.clear()  # drop our store client now, not during interpreter shutdown (seen to abort there)


_STORE: list = []


def init_distributed(backend: str, rank: int, world: int, timeout: datetime.timedelta, attempt: int) -> None:
    """init_process_group from the launcher's environment. Under torchrun's agent store, the process group's
    keys go under a per-attempt prefix: after a restart, gloo must never read an address the previous
    attempt's ranks published (seen on torch 2.13: 'connectFullMesh ... Connection refused' or a hang)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False, timeout=timeout)
        _STORE.append(store)
        dist.init_process_group(backend, store=dist.PrefixStore(f"ddpdoctor/attempt{attempt}", store), rank=rank,
                                world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout)


# A rank whose parameters are further than this from rank 0's (relative, the model's norm) has lost sync: one
# optimizer step taken on other gradients moves them by ~lr / |p| (1e-3 and up); float rounding, by ~1e-7.
DRIFT_TOLERANCE = 1e-4


def compare_checksums(model, step, rank, world, ddp, device, run_dir: Path) -> None:
    """Parameters should be bit-identical on every rank; when the digests differ, how far apart they are decides:
    float rounding that one rank's kernels do differently (a node with another thread count or CPU path) stays
    within DRIFT_TOLERANCE and is recorded, not fatal; a rank that lost sync (or a bad node) is far off and raises."""
    mine = param_digest(model)
    digests = [mine]
    if ddp:
        local = torch.tensor([mine], dtype=torch.int64, device=device)
        everyone = [torch.zeros_like(local) for _ in range(world)]
        dist.all_gather(everyone, local)  # sync: every rank needs every digest to judge
        digests = [int(t.item()) for t in everyone]
    bitwise = len(set(digests)) == 1
    drift = 0.0 if bitwise else param_drift(model, device)  # every rank takes this branch: the digests are shared
    equal = drift <= DRIFT_TOLERANCE
    if rank == 0:
        with open(run_dir / "checksums.jsonl", "a") as fh:
            fh.write(json.dumps({"step": step, "digests": digests, "equal": equal, "bitwise": bitwise,
                                 "max_rel_diff": drift}) + "\n")
    if not equal:
        odd = [r for r, d in enumerate(digests) if digests.count(d) == 1]
        raise RuntimeError(f"parameters differ across ranks at step {step} (odd rank(s): {odd}; largest relative "
                           f"difference from rank 0's: {drift:.3g})")


def param_drift(model: torch.nn.Module, device: torch.device) -> float:
    """How far this rank's parameters are from rank 0's, relative to their size (||mine - rank 0's|| / ||rank 0's||,
    the model as one vector), the largest over the ranks, the same number on every rank (two syncs). The whole
    model's norm, not each value's own: a parameter at 0 on rank 0 and 1e-8 elsewhere (Adam's step on a gradient
    that rounded to 1e-12 instead of 0) is rounding, which a per-value ratio would call 1%."""
    with torch.no_grad():
        flat = torch.cat([p.detach().double().reshape(-1) for p in model.parameters()])
        reference = flat.clone()
        dist.broadcast(reference, 0)
        drift = ((flat - reference).norm() / reference.norm().clamp_min(1e-12)).reshape(1).float().to(device)
        dist.all_reduce(drift, op=dist.ReduceOp.MAX)  # every rank must reach the same decision, or some go on alone
    return float(drift.item())


def _state(model, optimizer, scheduler, step) -> dict:
    # Only tensors, numbers, strings, lists and dicts: what torch.load(weights_only=True) accepts.
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "step": int(step), "rng": {"cpu": torch.get_rng_state()}}


def load_snapshot(path: Path, model, optimizer, scheduler, device) -> int:
    """weights_only=True: a snapshot is data, never code, even one copied from somewhere else."""
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["cpu"].cpu())
    return int(state["step"])


if __name__ == "__main__":
    main(sys.argv[1:])
