"""collective: once the links pass, a real process group through the same store: gloo always, NCCL where
GPUs are present. An allreduce whose result is checked (sum of ranks), a short bandwidth figure, per-node
timing, and for NCCL the first `NCCL WARN` line and the transport it chose. Bounded: a broken collective
is abandoned at its timeout and reported, never waited on."""
from __future__ import annotations

import datetime
import os
import tempfile
import threading
import time

from ddpdoctor.api import Check, Option, Skip, measure_collective, per_node

from .support.cuda import has_cuda
from .support.nccl_log import parse_nccl_transport

BW_BYTES = 4 << 20
# Test hook: hold this many seconds inside the process group, after its init and before the allreduce, so a
# test kills or freezes a node mid-collective for certain (the whole collective takes well under a second).
HOLD_ENV = "DDPDOCTOR_TEST_COLLECTIVE_HOLD_S"


def _run_backend(backend: str, view, timeout: float, bw_bytes: int) -> dict:
    """Join a process group through the preflight's store, check an allreduce, then measure bandwidth with
    nccl-bench's harness (the same timing, checking and busbw definition as `ddpdoctor nccl-bench`)."""
    import torch
    import torch.distributed as dist

    rank, world = view.world_rank, view.world_size
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    out = {"backend": backend, "ok": False, "result_ok": None, "busbw_gbps": None, "seconds": None, "error": None}
    start = time.perf_counter()
    dist.init_process_group(backend, store=view.pg_store(backend), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    try:
        out["init_s"] = round(time.perf_counter() - start, 3)
        _test_hold()
        t = torch.tensor([float(rank)], device=device)
        dist.all_reduce(t)
        expected = world * (world - 1) / 2
        out["result"] = float(t.item())
        out["result_ok"] = abs(out["result"] - expected) < 1e-6
        row = measure_collective("all_reduce", bw_bytes, device, backend=backend, timeout_s=timeout,
                                 warmup=1, iters=3, check=True)
        figures = row["in_place"]
        out["busbw_gbps"] = figures["busbw_gbs"]
        out["algbw_gbps"] = figures["algbw_gbs"]
        out["time_us"] = figures["time_us"]
        out["wrong"] = figures["wrong"]
        out["ok"] = bool(out["result_ok"]) and not figures["wrong"]
    finally:
        dist.destroy_process_group()
    out["seconds"] = round(time.perf_counter() - start, 3)
    return out


def _test_hold() -> None:
    try:
        hold = min(float(os.environ.get(HOLD_ENV) or 0), 600.0)
    except ValueError:
        return
    if hold > 0:
        time.sleep(hold)


def _bounded(fn, timeout: float) -> dict:
    box: dict = {}

    def work():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout + 5)
    if t.is_alive():
        return {"ok": False, "error": f"did not finish within {timeout:g} s (a peer never joined the collective)"}
    return box.get("value") or {"ok": False, "error": box.get("error", "unknown error")}


class _CaptureStderr:
    """NCCL prints its log from C on fd 2: redirect the fd itself to a file while it runs."""

    def __enter__(self):
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


class CollectiveCheck(Check):
    name = "collective"
    description = "allreduce across all nodes on gloo (and NCCL with GPUs): result checked, bandwidth, bounded"
    phase = "collective"
    imports = ("torch",)
    options = {
        "timeout_s": Option(30.0, "process-group timeout for the smoke test"),
        "min_busbw_gbps": Option(0.0, "gloo bus bandwidth below this is a warning (0: no floor)"),
    }
    timeout_s = 120.0

    def gather(self, ctx) -> dict:
        view = ctx.cluster
        if view is None:
            raise Skip("needs a cluster run")
        timeout = ctx.opts["timeout_s"]
        if view.budget is not None:  # the whole run has one deadline: the collective gets what is left of it
            timeout = view.budget.collective_limit(timeout)
            if timeout < 2.0:
                raise Skip("no time left in the run's budget for the collective (raise --timeout)")
        runs = [_bounded(lambda: _run_backend("gloo", view, timeout, BW_BYTES), timeout)]
        runs[0].setdefault("backend", "gloo")
        if has_cuda():
            os.environ.setdefault("NCCL_DEBUG", "INFO")
            with _CaptureStderr() as cap:
                nccl = _bounded(lambda: _run_backend("nccl", view, timeout, 64 << 20), timeout)
            nccl.setdefault("backend", "nccl")
            nccl.update(parse_nccl_transport(cap.text))
            runs.append(nccl)
        primary = runs[-1]
        return {"backend": primary["backend"], "ok": all(r.get("ok") for r in runs),
                "busbw_gbps": primary.get("busbw_gbps"), "seconds": primary.get("seconds"), "runs": runs,
                "world_size": view.world_size}

    def compare(self, facts_by_node, opts):
        floor = opts["min_busbw_gbps"]

        def judge(node, f):
            for run in f.get("runs", []):
                be = run.get("backend")
                if run.get("ok"):
                    bw = run.get("busbw_gbps")
                    text = (f"{be} allreduce on {node}: sum of ranks correct ({run.get('result'):g}), "
                            f"{run.get('time_us')} µs per 4 MiB op, busbw {bw} GB/s, init {run.get('init_s')} s")
                    if floor and bw is not None and bw < floor and be == "gloo":
                        yield self.warn(text, [node], actual=bw, expected=f">= {floor} GB/s",
                                        fix="check the interface (is gloo on the slow NIC?): set GLOO_SOCKET_IFNAME")
                    else:
                        yield self.passed(text, [node], actual=bw)
                elif run.get("result_ok") is False or run.get("wrong"):
                    yield self.fail(f"{be} allreduce on {node} returned wrong data: sum {run.get('result')}, "
                                    f"{run.get('wrong') or 0} wrong element(s) in the bandwidth run", [node],
                                    actual=run.get("result"), expected="sum of ranks",
                                    fix="data corruption in the collective: run `ddpdoctor nccl-bench --check` and "
                                        "drain this node if it repeats")
                else:
                    warn = run.get("first_warn")
                    yield self.fail(
                        f"{be} collective failed on {node}: {run.get('error')}" + (f" — {warn}" if warn else ""), [node],
                        actual=run.get("error"), expected="process group init and allreduce within the timeout",
                        fix=("set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface the names check found, and "
                             "allow all TCP between nodes; rerun with NCCL_DEBUG=INFO for the NCCL WARN lines"),
                        details={"first_warn": warn, "transport": run.get("transport")},
                    )

        return per_node(facts_by_node, judge)

