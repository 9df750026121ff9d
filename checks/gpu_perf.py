"""gpu-perf: how fast each GPU really is (issue #7 item 2; failure catalog E6, stragglers). Opt-in.

Enabled with ``--perf`` or ``--set gpu-perf.enabled=true``. gather measures every visible GPU of the node
at once (support/gpuperf.py: bf16 GEMM TFLOP/s, device copy GB/s, pinned host->device GB/s); compare judges
each GPU two ways: against a table of achievable figures for its SKU, and against the job's other GPUs of
the same model on every node (the job runs at its slowest GPU's pace).
"""
from __future__ import annotations

import re
import statistics
import time
from shlex import quote
from typing import Iterable

from ddpdoctor.api import Check, Option, Skip, import_error_words, passed_if_quiet

from .support.cuda import has_cuda
from .support.nvml import gpu_details, gpu_label

METRICS = {"gemm_tflops": ("bf16 GEMM", "TFLOP/s"), "copy_gbps": ("device memory copy", "GB/s"),
           "h2d_gbps": ("pinned host->device", "GB/s")}

# Achievable figures (not datasheet peaks), matched against the NVML/torch device name in order.
# H100 80GB HBM3 (SXM5): MEASURED with this tool's method (gpu-baseline-h100.md: 783 TFLOP/s, 2.98 TB/s,
# 55 GB/s). The measured-to-datasheet ratios there (783/989 dense bf16 = 0.79, 2980/3350 GB/s = 0.89,
# 55/64 GB/s PCIe gen5 x16 = 0.86) calibrate every other row: ESTIMATE = datasheet figure x that ratio.
# Datasheet inputs (dense bf16 TFLOP/s, memory GB/s, PCIe generation) are NVIDIA's product pages; PCIe gen4
# x16 = 32 GB/s -> 27.5, gen5 x16 = 64 GB/s -> 55. Treat non-H100 rows as estimates until measured.
SKU_TABLE: list[tuple[str, str, dict]] = [
    (r"H100 80GB HBM3|H100 SXM", "H100 SXM (measured)", {"gemm_tflops": 783, "copy_gbps": 2980, "h2d_gbps": 55}),
    (r"H100 NVL", "H100 NVL (est.: 835 TF, 3900 GB/s, gen5)", {"gemm_tflops": 660, "copy_gbps": 3470, "h2d_gbps": 55}),
    (r"H100 PCIe", "H100 PCIe (est.: 756 TF, 2039 GB/s, gen5)", {"gemm_tflops": 598, "copy_gbps": 1815, "h2d_gbps": 55}),
    (r"H200", "H200 (est.: 989 TF, 4800 GB/s, gen5)", {"gemm_tflops": 783, "copy_gbps": 4270, "h2d_gbps": 55}),
    (r"B200", "B200 (est.: 2250 TF, 8000 GB/s, gen5 host link)", {"gemm_tflops": 1780, "copy_gbps": 7120, "h2d_gbps": 55}),
    (r"A100.*80GB.*PCIe|A100 80GB PCIe", "A100 80GB PCIe (est.: 312 TF, 1935 GB/s, gen4)",
     {"gemm_tflops": 247, "copy_gbps": 1720, "h2d_gbps": 27.5}),
    (r"A100-SXM4-80GB|A100.*SXM.*80", "A100 SXM4 80GB (est.: 312 TF, 2039 GB/s, gen4)",
     {"gemm_tflops": 247, "copy_gbps": 1815, "h2d_gbps": 27.5}),
    (r"A100", "A100 40GB (est.: 312 TF, 1555 GB/s, gen4)", {"gemm_tflops": 247, "copy_gbps": 1384, "h2d_gbps": 27.5}),
    (r"L40S", "L40S (est.: 362 TF, 864 GB/s, gen4)", {"gemm_tflops": 286, "copy_gbps": 769, "h2d_gbps": 27.5}),
    (r"\bL4\b", "L4 (est.: 121 TF, 300 GB/s, gen4)", {"gemm_tflops": 96, "copy_gbps": 267, "h2d_gbps": 27.5}),
    (r"\bA10\b", "A10 (est.: 125 TF, 600 GB/s, gen4)", {"gemm_tflops": 99, "copy_gbps": 534, "h2d_gbps": 27.5}),
]


def reference_for(name: str | None) -> tuple[str, dict] | None:
    for pattern, label, figures in SKU_TABLE:
        if name and re.search(pattern, name):
            return label, figures
    return None


class GpuPerfCheck(Check):
    name = "gpu-perf"
    description = "Opt-in (--perf): bf16 GEMM, memory and host-copy bandwidth per GPU vs its SKU and vs the job's other GPUs"
    phase = "local"
    opt_in = "perf"  # `preflight --perf` sets "enabled"
    imports = ("torch",)
    timeout_s = 120.0
    options = {
        "enabled": Option(False, "measure the GPUs (takes ~10 s per node; preflight --perf sets it)"),
        "gemm_n": Option(8192, "GEMM size n (n x n x n, bf16)"),
        "copy_mib": Option(1024, "device copy size, MiB"),
        "h2d_mib": Option(256, "pinned host->device copy size, MiB"),
        "iters": Option(20, "timed repetitions per figure (median kept)"),
        "worker_timeout_s": Option(90.0, "a GPU's measurement taking longer than this fails"),
        "peer_warn_ratio": Option(0.9, "below this fraction of the median of the job's same-model GPUs warns"),
        "peer_fail_ratio": Option(0.7, "below this fraction of that median fails"),
        "table_warn_ratio": Option(0.8, "below this fraction of the SKU table's achievable figure warns"),
        "table_fail_ratio": Option(0.5, "below this fraction of the SKU table's figure fails"),
    }

    def gather(self, ctx) -> dict:
        opts = ctx.opts
        if not opts["enabled"]:
            raise Skip("opt-in: measure GPUs with `ddpdoctor preflight --perf` (or --set gpu-perf.enabled=true)")
        try:
            import torch
        except Exception as exc:  # noqa: BLE001
            raise Skip(f"torch cannot be imported: {import_error_words('torch', exc)} (the torch-build check "
                       "judges it)") from None
        if not has_cuda():
            raise Skip(f"no CUDA device for torch {torch.__version__} on this node")
        from .support.gpuperf import PerfConfig, measure_node

        cfg = PerfConfig(gemm_n=opts["gemm_n"], copy_bytes=opts["copy_mib"] << 20, h2d_bytes=opts["h2d_mib"] << 20,
                         iters=opts["iters"])
        t0 = time.perf_counter()
        gpus = measure_node(list(range(torch.cuda.device_count())), cfg, opts["worker_timeout_s"])
        return {"gpus": gpus, "config": {"gemm_n": cfg.gemm_n, "copy_bytes": cfg.copy_bytes,
                                         "h2d_bytes": cfg.h2d_bytes, "iters": cfg.iters},
                "seconds": round(time.perf_counter() - t0, 2)}

    def compare(self, facts_by_node, opts) -> list:
        out: list = []
        medians = _peer_medians(facts_by_node)
        for node in sorted(facts_by_node):
            found = []
            gpus = (facts_by_node[node] or {}).get("gpus") or []
            for g in gpus:
                if g.get("error"):
                    found.append(self.fail(f"{gpu_label(node, g)}: measurement failed: {g['error']}", [node],
                                           actual=g["error"], expected="figures", details=gpu_details(g),
                                           fix="run `python -m ddpdoctor_checks.support.gpuperf --device "
                                               f"{g.get('index')}` on {node} to see the error; check the GPU with "
                                               "nvidia-smi"))
                    continue
                found += list(self._judge_gpu(node, g, medians.get(g.get("name"), {}), opts))
            if gpus:
                passed_if_quiet(found, self, [node], lambda: f"{node}: {len(gpus)} GPU(s) perform as expected: "
                                + _ranges(gpus), actual={m: [g.get(m) for g in gpus] for m in METRICS})
            out += found
        return out

    def _judge_gpu(self, node, g, med: dict, opts) -> Iterable:
        ref = reference_for(g.get("name"))
        pw, pf = opts["peer_warn_ratio"], opts["peer_fail_ratio"]
        tw, tf = opts["table_warn_ratio"], opts["table_fail_ratio"]
        for metric, (what, unit) in METRICS.items():
            value = g.get(metric)
            if value is None:
                continue
            level, reasons, expected = None, [], []
            m = med.get(metric)
            if m and med.get("count", 0) >= 2:
                ratio = value / m
                expected.append(f">= {pw * m:.4g} {unit} ({pw:g} x median {m:.4g} of {med['count']} {g.get('name')})")
                if ratio < pw:
                    reasons.append(f"{ratio:.0%} of the median of the job's {med['count']} {g.get('name')} GPUs ({m:.4g})")
                    level = _worse(level, "fail" if ratio < pf else "warn")
            if ref:
                label, figures = ref
                r = value / figures[metric]
                expected.append(f">= {tw * figures[metric]:.4g} {unit} ({tw:g} x {figures[metric]:g}, {label})")
                if r < tw:
                    reasons.append(f"{r:.0%} of the {figures[metric]:g} {unit} achievable on {label}")
                    level = _worse(level, "fail" if r < tf else "warn")
            if level:
                make = self.fail if level == "fail" else self.warn
                yield make(f"{gpu_label(node, g)}: {what} {value:.4g} {unit} is {' and '.join(reasons)}", [node],
                           actual=value, expected="; ".join(expected), details={**gpu_details(g), "metric": metric},
                           fix=_fix(node, g, metric))


def _worse(a: str | None, b: str) -> str:
    return "fail" if "fail" in (a, b) else b


def _fix(node, g, metric) -> str:
    i = quote(str(g.get("index")))  # another node's value, in a line to paste
    if metric == "h2d_gbps":
        return (f"check GPU {i}'s PCIe link (gpu-health; nvidia-smi -q -d PCIE -i {i}), NUMA placement "
                "(nvidia-smi topo -m) and reseat it; or exclude " + node)
    return (f"check GPU {i} for clock slowdowns and power caps (nvidia-smi -q -d PERFORMANCE,POWER -i {i}), cooling "
            f"and other processes; exclude {node} from the job until fixed")


def _peer_medians(facts_by_node) -> dict[str, dict]:
    """Per GPU model, the median of each figure over every GPU of the job (all nodes)."""
    groups: dict[str, list[dict]] = {}
    for f in facts_by_node.values():
        for g in (f or {}).get("gpus") or []:
            if not g.get("error"):
                groups.setdefault(g.get("name"), []).append(g)
    out = {}
    for name, gs in groups.items():
        med = {"count": len(gs)}
        for metric in METRICS:
            values = [g[metric] for g in gs if isinstance(g.get(metric), (int, float))]
            med[metric] = statistics.median(values) if values else None
        out[name] = med
    return out


def _ranges(gpus) -> str:
    parts = []
    for metric, (what, unit) in METRICS.items():
        vals = [g[metric] for g in gpus if isinstance(g.get(metric), (int, float))]
        if vals:
            lo, hi = min(vals), max(vals)
            parts.append(f"{what} {lo:.4g}" + (f"-{hi:.4g}" if hi != lo else "") + f" {unit}")
    return ", ".join(parts)
