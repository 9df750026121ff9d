"""resources: what a DDP process needs from the OS: /dev/shm size, open-files and locked-memory limits, free
disk where results are written, memory and CPUs."""
from __future__ import annotations

import os
import resource

from ddpdoctor.api import Check, Option, passed_if_quiet, per_node

MIB = 1 << 20
GIB = 1 << 30
IB_SYSFS = "/sys/class/infiniband"


def _limit(which: int) -> dict:
    soft, hard = resource.getrlimit(which)
    conv = (lambda v: None if v == resource.RLIM_INFINITY else int(v))
    return {"soft": conv(soft), "hard": conv(hard)}  # None means unlimited


def _disk(path: str) -> dict:
    st = os.statvfs(path)
    return {"path": path, "free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}


def _existing(path: str) -> str:
    """The directory itself, or its nearest existing parent: a results directory is made when the result is
    written, after this measurement, on the same filesystem as its parent."""
    p = os.path.abspath(path)
    for _ in range(64):  # bounded: a path has few components
        if os.path.exists(p) or p == os.path.dirname(p):
            return p
        p = os.path.dirname(p)
    return p


class ResourcesCheck(Check):
    name = "resources"
    description = "/dev/shm size, open-files and locked-memory limits, free disk for results, memory, CPUs"
    options = {
        "min_shm_mib": Option(1024, "a smaller /dev/shm is a warning (NCCL and DataLoader workers use it)"),
        "fail_shm_mib": Option(256, "a /dev/shm smaller than this is a failure (Docker's 64 MiB default breaks NCCL)"),
        "min_nofile": Option(4096, "a smaller open-files soft limit is a warning"),
        "min_free_disk_gib": Option(1.0, "less free disk where results are written is a warning"),
        "min_available_memory_gib": Option(2.0, "less available memory is a warning"),
    }

    def gather(self, ctx) -> dict:
        import psutil

        out_dir = str((ctx.run or {}).get("output_dir") or os.getcwd())
        facts: dict = {
            "nofile": _limit(resource.RLIMIT_NOFILE),
            "memlock": _limit(resource.RLIMIT_MEMLOCK),
            "infiniband": os.path.isdir(IB_SYSFS) and bool(os.listdir(IB_SYSFS)),
            "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        }
        try:
            facts["shm"] = _disk("/dev/shm")
        except OSError as exc:
            facts["shm"] = {"path": "/dev/shm", "error": str(exc)}
        try:
            facts["disk"] = _disk(_existing(out_dir))
        except OSError as exc:
            facts["disk"] = {"path": out_dir, "error": str(exc)}
        vm = psutil.virtual_memory()
        facts["memory"] = {"total_bytes": vm.total, "available_bytes": vm.available}
        return facts

    def compare(self, facts_by_node, opts):
        return per_node(facts_by_node, lambda node, f: self.judge(node, f, opts))

    def judge(self, node: str, f: dict, opts) -> list:
        out = []
        shm = f.get("shm") or {}
        if shm.get("error"):
            out.append(self.fail(f"/dev/shm is unusable: {shm['error']}", [node], actual=shm["error"],
                                 expected="a tmpfs at /dev/shm", fix="mount -t tmpfs -o size=16g tmpfs /dev/shm"))
        elif shm.get("total_bytes") is not None:
            size_mib = shm["total_bytes"] / MIB
            fix = ("docker run --shm-size=16g ... (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory "
                   "at /dev/shm; bare metal: mount -o remount,size=16g /dev/shm")
            if size_mib < opts["fail_shm_mib"]:
                out.append(self.fail(f"/dev/shm is {size_mib:.0f} MiB: NCCL and DataLoader workers fail with "
                                     "'unhandled system error' / bus errors", [node], actual=f"{size_mib:.0f} MiB",
                                     expected=f">= {opts['min_shm_mib']} MiB", fix=fix))
            elif size_mib < opts["min_shm_mib"]:
                out.append(self.warn(f"/dev/shm is {size_mib:.0f} MiB", [node], actual=f"{size_mib:.0f} MiB",
                                     expected=f">= {opts['min_shm_mib']} MiB", fix=fix))
        nofile = (f.get("nofile") or {}).get("soft")
        if nofile is not None and nofile < opts["min_nofile"]:
            out.append(self.warn(f"open-files limit is {nofile}: every rank holds sockets to its peers", [node],
                                 actual=nofile, expected=f">= {opts['min_nofile']}",
                                 fix="ulimit -n 65536  (persist in /etc/security/limits.conf or the job script)"))
        memlock = (f.get("memlock") or {}).get("soft")
        if f.get("infiniband") and memlock is not None:
            out.append(self.fail(f"locked-memory limit is {memlock // 1024} KiB on a node with InfiniBand: RDMA "
                                 "cannot register buffers and NCCL falls back or fails", [node],
                                 actual=f"{memlock // 1024} KiB", expected="unlimited",
                                 fix="ulimit -l unlimited  (limits.conf: * - memlock unlimited; containers: "
                                     "--ulimit memlock=-1)"))
        disk = f.get("disk") or {}
        if disk.get("error"):
            out.append(self.warn(f"cannot stat {disk.get('path')}: {disk['error']}", [node], actual=disk["error"],
                                 expected="a writable results directory", fix="pass --output to a writable directory"))
        elif disk.get("free_bytes") is not None and disk["free_bytes"] / GIB < opts["min_free_disk_gib"]:
            out.append(self.warn(f"{disk['free_bytes'] / GIB:.2f} GiB free in {disk.get('path')}", [node],
                                 actual=f"{disk['free_bytes'] / GIB:.2f} GiB",
                                 expected=f">= {opts['min_free_disk_gib']} GiB",
                                 fix="free space there, or write results elsewhere (--output DIR)"))
        avail = (f.get("memory") or {}).get("available_bytes")
        if avail is not None and avail / GIB < opts["min_available_memory_gib"]:
            out.append(self.warn(f"only {avail / GIB:.1f} GiB of memory available", [node],
                                 actual=f"{avail / GIB:.1f} GiB",
                                 expected=f">= {opts['min_available_memory_gib']} GiB",
                                 fix="stop other processes on this node, or use a node with more memory"))
        mem = (f.get("memory") or {}).get("total_bytes") or 0
        return passed_if_quiet(out, self, [node], f"/dev/shm {(shm.get('total_bytes') or 0) / GIB:.1f} GiB, nofile "
                               f"{nofile if nofile is not None else 'unlimited'}, memory {mem / GIB:.1f} GiB, CPUs "
                               f"{f.get('cpu_affinity') or f.get('cpu_count')}")
