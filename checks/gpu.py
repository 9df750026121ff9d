"""gpu: which GPUs this node has and which ones the job can use (issue #2 item 4; failure catalog E1-E3, E5).

Split with gpu-health, so each finding is reported once:
  gpu         the driver is there (or not), how many GPUs NVML sees, what CUDA_VISIBLE_DEVICES selects
              (indices, UUIDs, MIG ids), what torch sees, how many the job needs (--gpus-per-node or the
              launcher's LOCAL_WORLD_SIZE), LOCAL_RANK beyond the visible GPUs, the driver's CUDA version against
              torch's, compute mode (E5), MIG mode, other processes already on a GPU, a GPU that is lost.
  gpu-health  hardware faults of GPUs that are visible: ECC, row remaps, retired pages, Xid, clock
              slowdowns, PCIe link, temperature, power cap, persistence, NVLink.
The facts hold a per-GPU snapshot (ECC counters, temperature, clocks, PCIe too: the report shows them), but
only gpu-health judges those: it reads them through ``uses``. NVML access lives in support/nvml.py, CUDA's
view in support/cuda.py; pynvml and torch are imported inside functions: the CLI never pays for them.
"""
from __future__ import annotations

import os
from collections import Counter
from shlex import quote
from typing import Any, Iterable

from ddpdoctor.api import Check, Option, is_quiet, per_node

from .support.cuda import cuda_version_str, gpus_needed, int_env, resolve_visible, torch_view, version_tuple
from .support.nvml import (NVML_ERROR_LIB_RM_VERSION_MISMATCH, NvmlUnavailable, Reader, gpu_details, gpu_label,
                           nvml_session, snapshot, text)

__all__ = ["GpuCheck", "resolve_visible", "torch_view"]


class GpuCheck(Check):
    name = "gpu"
    facts_shape = {"gpus": ["object"]}
    description = "NVIDIA driver, GPUs visible to CUDA and torch vs the GPUs the job needs; compute mode, MIG, busy GPUs"
    phase = "local"
    imports, kept_facts = ("torch",), ("torch_version", "torch_cuda_version", "torch_error")  # a prolog: kept, no count
    timeout_s = 60.0
    options = {
        "allow_foreign_processes": Option(False, "other processes on a GPU are not worth a warning"),
    }

    def gather(self, ctx) -> dict:
        facts: dict[str, Any] = {
            "driver_version": None, "cuda_driver_version": None, "gpus": [], "no_driver": False,
            "nvml_error": None, "nvml_error_code": None,
            "expected": {"gpus_per_node": (ctx.run or {}).get("gpus_per_node"),
                         "nproc_per_node": (ctx.run or {}).get("nproc_per_node"),
                         "local_world_size": int_env("LOCAL_WORLD_SIZE"), "local_rank": int_env("LOCAL_RANK")},
        }
        raw_cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            with nvml_session() as nv:
                r = Reader(nv)
                facts["driver_version"] = r.get("driver_version", "nvmlSystemGetDriverVersion", conv=text)
                facts["cuda_driver_version"] = cuda_version_str(
                    r.get("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"))
                count = nv.nvmlDeviceGetCount()
                facts["gpus"] = [snapshot(nv, i) for i in range(count)]
        except NvmlUnavailable as exc:
            facts.update(no_driver=exc.no_driver, nvml_error=str(exc), nvml_error_code=exc.code)
        facts["cuda_visible_devices"] = resolve_visible(raw_cvd, [g for g in facts["gpus"] if not g.get("lost")])
        facts["visible_count"] = len(facts["cuda_visible_devices"]["resolved"])
        facts.update(torch_view() if ctx.kept is None else ctx.kept)  # a prolog: torch's build as kept, no count
        return facts

    def exports(self, facts: dict) -> dict:
        if not isinstance(facts.get("gpus"), list):
            return {}
        gpus = [g for g in facts["gpus"] if isinstance(g, dict)]
        models = Counter(str(g.get("name") or "unknown") for g in gpus if not g.get("lost"))
        return {"versions": {"driver": facts.get("driver_version")},
                "gpus": {"count": len(gpus), "models": dict(sorted(models.items())),
                         "lost": sum(1 for g in gpus if g.get("lost"))}}

    def comparable(self, facts: dict) -> dict:
        """The driver, the GPU models and, unless this node says how many processes it starts, the GPU count:
        a node that does (--nproc-per-node, LOCAL_WORLD_SIZE, --gpus-per-node) has its GPUs judged against its
        own processes (``_visibility``), so nodes with 4 and 2 GPUs starting 4 and 2 processes are legal."""
        if not isinstance(facts.get("gpus"), list):
            return {}
        gpus = [g for g in facts["gpus"] if isinstance(g, dict)]
        out = {"driver_version": facts.get("driver_version"), "count": len(gpus),
               "models": sorted({str(g["name"]) for g in gpus if g.get("name") is not None})}
        if gpus_needed(facts)[0]:
            del out["count"]
        return out

    def compare(self, facts_by_node, opts):
        # no driver = a CPU node only when no node has GPUs (a GPU node whose driver failed to load must fail)
        cpu_run = not any(isinstance(f, dict) and f.get("gpus") for f in facts_by_node.values())
        return per_node(facts_by_node, lambda node, f: self._judge(node, f, opts, cpu_run))

    # ---- judgement, one node at a time -------------------------------------------------------------------
    def _judge(self, node: str, f: dict, opts, cpu_run: bool = True) -> Iterable:
        # --gpus-per-node on the master holds for every node; otherwise each node's own processes (nodes may
        # differ: heterogeneous --nproc-per-node)
        expected, source = (opts["gpus_per_node"], "--gpus-per-node") if opts.get("gpus_per_node") else gpus_needed(f)
        if f.get("nvml_error"):
            # a CPU node (gloo) may start processes without any GPU: a process count (--nproc-per-node, or
            # torchrun's LOCAL_WORLD_SIZE, set on CPU nodes too) asks for GPUs only where there is a driver
            if source.startswith("--nproc-per-node") or (source.startswith("LOCAL_WORLD_SIZE") and cpu_run):
                expected = None
            yield from self._no_nvml(node, f, expected, source)
            return
        found = []
        found += self._visibility(node, f, expected, source)
        found += self._torch_and_driver(node, f, expected)
        found += self._state(node, f, opts)
        yield from found
        if is_quiet(found):
            gpus = [g for g in f.get("gpus") or [] if not g.get("lost")]
            names = sorted({g.get("name") for g in gpus})
            yield self.passed(
                f"{node}: {f.get('visible_count')} of {len(gpus)} GPU(s) visible ({', '.join(map(str, names)) or 'none'});"
                f" torch sees {f.get('torch_device_count', '(not counted: prolog)')}" + (f", {expected} expected" if expected else "")
                + f"; driver {f.get('driver_version')}, CUDA {f.get('cuda_driver_version')}",
                [node], actual=f.get("visible_count"), expected=expected)

    def _no_nvml(self, node, f, expected, source):
        err = f.get("nvml_error")
        if f.get("no_driver"):
            msg = f"no NVIDIA driver on {node} ({err})"
            if expected:
                yield self.fail(f"{msg}, but {expected} GPU(s) expected ({source})", [node], actual=err,
                                expected=f"{expected} GPUs", fix="install the NVIDIA driver (nvidia-smi must work) "
                                "or run on a GPU node; in a container use --gpus all / the NVIDIA container toolkit")
            else:
                yield self.skip(f"{msg}: GPU checks do not apply", [node], actual=err)
            return
        fix = ("reboot the node (or unload and reload the nvidia kernel modules): the driver was upgraded without one"
               if f.get("nvml_error_code") == NVML_ERROR_LIB_RM_VERSION_MISMATCH
               else "check `nvidia-smi` on this node; reinstall or reload the NVIDIA driver")
        yield self.fail(f"NVML does not work on {node}: {err}", [node], actual=err, expected="nvmlInit succeeds", fix=fix)

    def _visibility(self, node, f, expected, source):
        out = []
        gpus = f.get("gpus") or []
        cvd = f.get("cuda_visible_devices") or {}
        for g in gpus:
            if g.get("lost"):
                out.append(self.fail(f"{node} GPU {g['index']} does not answer NVML: {g.get('error')}", [node],
                                     actual=g.get("error"), expected="every GPU answers",
                                     fix=f"drain {node}; reset the GPU (`nvidia-smi -r -i {quote(str(g['index']))}`) or reboot; "
                                         "replace it if it stays lost (Xid 79: fallen off the bus)", details={"gpu": g["index"]}))
        valid = ", ".join(f"{g['index']} ({g.get('uuid')})" for g in gpus if not g.get("lost")) or "none"
        if cvd.get("invalid") is not None:
            ignored = f" and ignores what follows it ({','.join(cvd['ignored'])})" if cvd.get("ignored") else ""
            out.append(self.fail(
                f"CUDA_VISIBLE_DEVICES={cvd.get('raw')} on {node}: entry {cvd['invalid']!r} matches no GPU; "
                f"CUDA stops at it{ignored}", [node], actual=cvd.get("raw"), expected=f"indices or UUIDs of: {valid}",
                fix=f"export CUDA_VISIBLE_DEVICES={','.join(str(i) for i in range(len(gpus))) or '<ids>'}  "
                    "# or unset it; check the scheduler's GPU binding"))
        if cvd.get("duplicates"):
            out.append(self.fail(
                f"CUDA_VISIBLE_DEVICES={cvd.get('raw')} on {node} names the same GPU twice ({', '.join(cvd['duplicates'])})",
                [node], actual=cvd.get("raw"), expected="each GPU once",
                fix="list each GPU once; two ranks on one GPU fail with NCCL 'Duplicate GPU detected'"))
        visible = int(f.get("visible_count") or 0)
        torch_n = f.get("torch_device_count")
        usable = min(visible, torch_n) if isinstance(torch_n, int) and f.get("torch_cuda_version") else visible
        if expected and usable < int(expected):
            out.append(self.fail(
                f"{node} has {usable} usable GPU(s) but the job needs {expected} ({source}); NVML sees {len(gpus)}, "
                f"CUDA_VISIBLE_DEVICES selects {visible}, torch sees {torch_n}", [node],
                actual=usable, expected=int(expected),
                fix=f"run with --nproc-per-node={usable} on {node}, or free/expose more GPUs "
                    "(CUDA_VISIBLE_DEVICES, the scheduler's --gpus, the container's --gpus)"))
        lr = (f.get("expected") or {}).get("local_rank")
        if isinstance(lr, int) and usable and lr >= usable:
            out.append(self.fail(
                f"LOCAL_RANK={lr} on {node} but only {usable} GPU(s) are visible: cuda:{lr} is an invalid device "
                "ordinal", [node], actual=lr, expected=f"< {usable}",
                fix="with one GPU bound per task use torch.cuda.set_device(0); otherwise make --nproc-per-node "
                    "match the visible GPUs"))
        return out

    def _torch_and_driver(self, node, f, expected):
        out = []
        visible = int(f.get("visible_count") or 0)
        if f.get("torch_error"):
            out.append(self.warn(f"torch cannot be imported on {node}: {f['torch_error']}", [node],
                                 actual=f["torch_error"], expected="import torch works",
                                 fix="pip install torch (see the torch-build check)"))
            return out
        if visible and not f.get("torch_cuda_version"):
            make = self.fail if expected else self.warn
            out.append(make(f"torch {f.get('torch_version')} on {node} is a CPU build but {visible} GPU(s) are visible",
                            [node], actual=f.get("torch_version"), expected="a CUDA build of torch",
                            fix="pip install torch --index-url https://download.pytorch.org/whl/cu124  "
                                "# pick the CUDA version your driver supports"))
            return out
        torch_n = f.get("torch_device_count")
        if f.get("torch_cuda_version") and isinstance(torch_n, int) and torch_n != visible:
            out.append(self.warn(
                f"torch sees {torch_n} GPU(s) on {node} but NVML with CUDA_VISIBLE_DEVICES selects {visible}",
                [node], actual=torch_n, expected=visible,
                fix="check the CUDA runtime: python -c 'import torch; print(torch.cuda.device_count())' shows the "
                    "error; a driver older than torch's CUDA or a MIG/cgroup restriction hides GPUs"))
        drv, tcu = version_tuple(f.get("cuda_driver_version")), version_tuple(f.get("torch_cuda_version"))
        if drv and tcu and drv < tcu:
            make = self.fail if drv[0] < tcu[0] else self.warn
            why = ("CUDA driver version is insufficient for CUDA runtime version" if drv[0] < tcu[0]
                   else "minor-version compatibility only: PTX JIT and some features fail")
            out.append(make(
                f"the driver on {node} supports CUDA {f.get('cuda_driver_version')} but torch was built for CUDA "
                f"{f.get('torch_cuda_version')} ({why})", [node], actual=f.get("cuda_driver_version"),
                expected=f">= {f.get('torch_cuda_version')}",
                fix=f"upgrade the NVIDIA driver on {node} (now {quote(str(f.get('driver_version')))}), or install a torch "
                    f"built for CUDA {quote(str(f.get('cuda_driver_version')))}"))
        return out

    def _state(self, node, f, opts):
        out = []
        selected = set((f.get("cuda_visible_devices") or {}).get("resolved") or [])
        for g in f.get("gpus") or []:
            if g.get("lost") or g["index"] not in selected:
                continue
            label, det = gpu_label(node, g), gpu_details(g)
            foreign = [p for p in g.get("processes") or [] if not p.get("ours")]
            mode = g.get("compute_mode")
            if mode == "prohibited":
                out.append(self.fail(f"{label} is in compute mode Prohibited: no process can use it", [node],
                                     actual=mode, expected="default", details=det,
                                     fix=f"sudo nvidia-smi -i {quote(str(g['index']))} -c DEFAULT"))
            elif mode in ("exclusive_process", "exclusive_thread"):
                make = self.fail if foreign else self.warn
                out.append(make(
                    f"{label} is in compute mode {mode}" + (" and already has a process" if foreign else "")
                    + ": a second CUDA context on it fails with 'all CUDA-capable devices are busy or unavailable'",
                    [node], actual=mode, expected="default", details=det,
                    fix=f"sudo nvidia-smi -i {quote(str(g['index']))} -c DEFAULT  # or make sure one process per GPU, nothing else"))
            if foreign and not opts["allow_foreign_processes"]:
                listed = ", ".join(f"pid {p['pid']}" + (f" {p['name']}" if p.get("name") else "")
                                   + (f" ({p['used_memory_bytes'] / 2**30:.1f} GiB)" if p.get("used_memory_bytes") else "")
                                   for p in foreign[:6])
                out.append(self.warn(
                    f"{label} already runs {len(foreign)} other process(es): {listed}", [node],
                    actual=[p["pid"] for p in foreign], expected="no other process on the GPU", details=det,
                    fix=f"kill {' '.join(quote(str(p['pid'])) for p in foreign[:6])}  # after checking with "
                        f"nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv -i {quote(str(g['index']))}"))
            if g.get("mig_enabled"):
                out.append(self.warn(
                    f"{label} has MIG enabled ({len(g.get('mig_devices') or [])} instance(s)): a process sees one MIG "
                    "instance and there is no P2P/NVLink between instances, so NCCL is slow or fails",
                    [node], actual="MIG on", expected="MIG off for DDP", details=det,
                    fix=f"sudo nvidia-smi -i {quote(str(g['index']))} -mig 0 && sudo nvidia-smi -r -i {quote(str(g['index']))}"))
            elif g.get("mig_pending_enabled") is not None and g.get("mig_pending_enabled") != g.get("mig_enabled"):
                out.append(self.warn(f"{label}: a MIG mode change is pending until the GPU is reset", [node],
                                     actual=g.get("mig_pending_enabled"), expected=g.get("mig_enabled"), details=det,
                                     fix=f"sudo nvidia-smi -r -i {quote(str(g['index']))}"))
        return out
