"""GPU micro-benchmarks for gpu-perf: bf16 GEMM TFLOP/s, device memory bandwidth, pinned host->device bandwidth.

Every figure is timed with CUDA events after a warm-up, one event pair per repetition, and the median is
kept (robust to a stray slow repetition). ``measure_node`` measures all GPUs at once, one worker process per
GPU (``python -m ddpdoctor_checks.support.gpuperf --device I``, answering one JSON line on stdout):
separate processes so each GPU gets its own CUDA context and Python interpreter, and a stuck worker is
killed at the timeout.
Host->device copies share the host's memory and PCIe root complexes, so workers take turns for that one
figure (an flock on a shared file) and each GPU's link is measured on its own.

torch is imported inside the functions that need it.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass


@dataclass
class PerfConfig:
    gemm_n: int = 8192  # bf16 GEMM of n x n by n x n: 2 n^3 flops
    copy_bytes: int = 1 << 30  # device-to-device copy; bandwidth counts bytes read + written
    h2d_bytes: int = 256 << 20  # pinned host -> device
    iters: int = 20
    warmup: int = 5


def _median_ms(fn, iters: int, warmup: int) -> float:
    """Median milliseconds of ``fn()`` on the current stream, CUDA events around each repetition."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def measure_gemm(device: int, n: int = 8192, iters: int = 20, warmup: int = 5) -> float:
    """bf16 matmul n x n x n, TFLOP/s."""
    import torch

    dev = torch.device("cuda", device)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    with torch.cuda.device(dev):
        ms = _median_ms(lambda: torch.mm(a, b, out=c), iters, warmup)
    del a, b, c
    return 2.0 * n ** 3 / (ms / 1e3) / 1e12


def measure_copy(device: int, nbytes: int = 1 << 30, iters: int = 20, warmup: int = 5) -> float:
    """Device-to-device copy of ``nbytes``, GB/s counting bytes read plus bytes written."""
    import torch

    dev = torch.device("cuda", device)
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    with torch.cuda.device(dev):
        ms = _median_ms(lambda: dst.copy_(src), iters, warmup)
    del src, dst
    return 2.0 * nbytes / (ms / 1e3) / 1e9


def measure_h2d(device: int, nbytes: int = 256 << 20, iters: int = 20, warmup: int = 5) -> float:
    """Pinned host -> device copy of ``nbytes``, GB/s."""
    import torch

    dev = torch.device("cuda", device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    with torch.cuda.device(dev):
        ms = _median_ms(lambda: dst.copy_(host, non_blocking=True), iters, warmup)
    del host, dst
    return nbytes / (ms / 1e3) / 1e9


def identity(device: int) -> dict:
    """index, name, UUID ("GPU-..." as NVML spells it) and PCI bus id of a torch device."""
    import torch

    p = torch.cuda.get_device_properties(device)
    uuid = getattr(p, "uuid", None)
    uuid = f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else (str(uuid) if uuid else None)
    bus = None
    if getattr(p, "pci_bus_id", None) is not None:
        bus = f"{getattr(p, 'pci_domain_id', 0):08X}:{p.pci_bus_id:02X}:{getattr(p, 'pci_device_id', 0):02X}.0"
    return {"index": device, "name": p.name, "uuid": uuid, "pci_bus_id": bus}


@contextlib.contextmanager
def _turn(lock_path: str | None):
    """Exclusive turn among this node's workers (for the host->device figure)."""
    if not lock_path:
        yield
        return
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def measure_gpu(device: int, cfg: PerfConfig, lock_path: str | None = None) -> dict:
    """All three figures for one GPU, in this process."""
    import torch

    if not torch.cuda.is_available() or device >= torch.cuda.device_count():
        raise RuntimeError(f"no CUDA device {device} (torch {torch.__version__} sees "
                           f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})")
    torch.cuda.set_device(device)
    out = identity(device)
    t0 = time.perf_counter()
    out["gemm_tflops"] = round(measure_gemm(device, cfg.gemm_n, cfg.iters, cfg.warmup), 2)
    out["copy_gbps"] = round(measure_copy(device, cfg.copy_bytes, cfg.iters, cfg.warmup), 1)
    torch.cuda.empty_cache()
    with _turn(lock_path):
        out["h2d_gbps"] = round(measure_h2d(device, cfg.h2d_bytes, cfg.iters, cfg.warmup), 2)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def measure_node(devices: list[int], cfg: PerfConfig, timeout_s: float = 60.0) -> list[dict]:
    """Measure these torch device indices at once, one worker process each; a worker that fails or overruns
    ``timeout_s`` gives {"index", "error"} (and is killed). Workers write to files, not pipes, so a chatty
    one never blocks while another is being waited on."""
    with tempfile.TemporaryDirectory(prefix="ddpdoctor-gpuperf-") as tmp:
        lock = os.path.join(tmp, "h2d.lock")
        procs = {}
        for d in devices:
            cmd = [sys.executable, "-m", "ddpdoctor_checks.support.gpuperf", "--device", str(d), "--lock", lock,
                   "--config", json.dumps(asdict(cfg))]
            out = open(os.path.join(tmp, f"{d}.out"), "w+")
            err = open(os.path.join(tmp, f"{d}.err"), "w+")
            procs[d] = (subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True), out, err)
        deadline = time.monotonic() + timeout_s
        results = []
        for d, (p, out, err) in procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill(p)
                results.append({"index": d, "error": f"did not finish within {timeout_s:g} s"})
            else:
                out.seek(0)
                err.seek(0)
                results.append(_parse_worker(d, p.returncode, out.read(), err.read()))
            out.close()
            err.close()
        return results


def _kill(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, 9)
    with contextlib.suppress(Exception):
        p.wait(timeout=5)


def _parse_worker(device: int, rc: int, out: str, err: str) -> dict:
    for line in reversed((out or "").strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    tail = (err or "").strip().splitlines()
    return {"index": device, "error": f"worker exited {rc}: {tail[-1] if tail else 'no output'}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpdoctor_checks.support.gpuperf", description="measure one GPU (JSON on stdout)")
    ap.add_argument("--device", type=int, required=True)
    ap.add_argument("--lock", default=None)
    ap.add_argument("--config", default="{}", help="PerfConfig fields as JSON")
    args = ap.parse_args(argv)
    cfg = PerfConfig(**json.loads(args.config))
    try:
        result = measure_gpu(args.device, cfg, args.lock)
    except Exception as exc:  # noqa: BLE001 - reported as this GPU's error, the others go on
        result = {"index": args.device, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
