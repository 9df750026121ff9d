"""parity: the nodes run the same software: Python, torch/CUDA/NCCL build, driver, packages, communication
env vars, GPU model and count, the set of checks, ddpdoctor itself and (with --code) the training code.
Each difference names the node that differs from the majority, with both values."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from ddpdoctor.api import Check, majority

# Env vars that legitimately differ per node: identities, hostnames, per-node device lists.
NODE_SPECIFIC = {
    "RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "ROLE_RANK", "HOSTNAME", "SLURM_NODEID", "SLURM_PROCID",
    "SLURM_LOCALID", "SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR", "SLURM_STEP_NODELIST", "SLURM_TASK_PID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PBS_TASKNUM", "PBS_NODENUM",
    "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_ERROR_FILE", "SLURM_CPU_BIND", "SLURM_JOB_CPUS_PER_NODE",
}
PER_NODE_OK = ("_SOCKET_IFNAME",)  # interface names may differ per node: the names check judges them
HARD_PREFIXES = ("NCCL_", "TORCH_", "GLOO_")
CODE_HASH_LIMIT = 20000  # files hashed outside git; beyond that the fingerprint says it is partial


def code_fingerprint(path: str) -> dict:
    """git HEAD plus a hash of the uncommitted diff; outside git, a hash of every file's path and content."""
    p = Path(path)
    try:
        head = subprocess.run(["git", "-C", str(p), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            diff = subprocess.run(["git", "-C", str(p), "diff", "HEAD"], capture_output=True, timeout=20).stdout
            untracked = subprocess.run(["git", "-C", str(p), "ls-files", "--others", "--exclude-standard"],
                                       capture_output=True, timeout=20).stdout
            return {"kind": "git", "head": head.stdout.strip(), "dirty": bool(diff.strip() or untracked.strip()),
                    "fingerprint": hashlib.sha256(head.stdout.encode() + diff + untracked).hexdigest()[:16]}
    except (OSError, subprocess.TimeoutExpired):
        pass
    h = hashlib.sha256()
    count = 0
    for root, dirs, files in os.walk(p):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__"))
        for name in sorted(files):
            if count >= CODE_HASH_LIMIT:
                break
            f = Path(root) / name
            try:
                h.update(str(f.relative_to(p)).encode() + b"\0" + f.read_bytes())
            except OSError:
                continue
            count += 1
    return {"kind": "content", "files": count, "partial": count >= CODE_HASH_LIMIT, "fingerprint": h.hexdigest()[:16]}


def _scalar_items(facts: dict | None) -> dict:
    skip = ("path", "file", "executable", "prefix", "dir", "seconds", "error")
    return {k: v for k, v in (facts or {}).items()
            if isinstance(v, (str, int, float, bool)) and not any(s in k.lower() for s in skip)}


def _packages(facts: dict | None) -> dict[str, str]:
    out = {}
    for item in (facts or {}).get("packages", []) or []:
        name, _, version = str(item).partition("==")
        out[name.lower()] = version
    return out


class ParityCheck(Check):
    name = "parity"
    description = "Same Python, torch/CUDA/NCCL, driver, packages, env vars, GPUs, checks and code on every node"
    phase = "cluster"
    uses = ("packages", "torch-build", "env-vars", "gpu")

    def gather(self, ctx) -> dict:
        from ddpdoctor import __version__

        view = ctx.cluster
        facts = {"ddpdoctor": __version__, "checks": view.me.get("checks", [])}
        if view.code_dir:
            facts["code"] = {"dir": view.code_dir, **code_fingerprint(view.code_dir)}
        return facts

    def compare(self, facts_by_node, opts):
        out = []
        if len(facts_by_node) < 2:
            return [self.skip("one node: nothing to compare", sorted(facts_by_node))]
        out += self._field("ddpdoctor version", {n: f.get("ddpdoctor") for n, f in facts_by_node.items()},
                           "install the same ddpdoctor version on every node")
        out += self._field("set of checks", {n: f.get("checks") for n, f in facts_by_node.items()},
                           "install the same ddpdoctor plugins on every node (pip list | grep ddpdoctor)")
        codes = {n: (f.get("code") or {}).get("fingerprint") for n, f in facts_by_node.items() if f.get("code")}
        out += self._field("training code", codes,
                           "sync the code to every node (same git commit, no local edits), or run from a shared filesystem")
        uses = {n: f.get("uses") or {} for n, f in facts_by_node.items()}
        out += self._build(uses)
        out += self._package_diff(uses)
        out += self._env_diff(uses)
        out += self._gpu_diff(uses)
        if not any(r.level.value == "fail" or r.level.value == "warn" for r in out):
            out.append(self.passed(f"{len(facts_by_node)} nodes run the same software", sorted(facts_by_node)))
        return out

    def _field(self, what, values, fix, level="fail"):
        values = {n: v for n, v in values.items() if v is not None}
        common, odd = majority(values)
        make = self.fail if level == "fail" else self.warn
        return [make(f"{what} on {n} differs: {values[n]!r} vs {common!r} on the others", [n],
                     actual=values[n], expected=common, fix=fix) for n in odd]

    def _build(self, uses):
        out = []
        builds = {n: _scalar_items(u.get("torch-build")) for n, u in uses.items() if u.get("torch-build")}
        keys = sorted({k for b in builds.values() for k in b})
        for key in keys:
            out += self._field(f"torch-build {key}", {n: b.get(key) for n, b in builds.items()},
                               "all nodes must run the identical environment/image: same Python, torch, CUDA and NCCL "
                               "(pip install torch==<version> on the odd node, or use one container image)")
        drivers = {n: (u.get("gpu") or {}).get("driver_version") for n, u in uses.items() if u.get("gpu")}
        out += self._field("NVIDIA driver", drivers, "install the same NVIDIA driver on every node")
        return out

    def _package_diff(self, uses):
        pkgs = {n: _packages(u.get("packages")) for n, u in uses.items() if u.get("packages")}
        if len(pkgs) < 2:
            return []
        by_node_diffs: dict[str, list[str]] = {}
        for name in sorted({p for d in pkgs.values() for p in d}):
            values = {n: d.get(name, "(missing)") for n, d in pkgs.items()}
            common, odd = majority(values)
            for n in odd:
                by_node_diffs.setdefault(n, []).append(f"{name} {values[n]} (others: {common})")
        out = []
        for n, diffs in sorted(by_node_diffs.items()):
            pins = " ".join(f"'{d.split()[0]}=={d.split('others: ')[1].rstrip(')')}'" for d in diffs
                            if "(missing)" not in d.split("(others")[1])
            out.append(self.fail(
                f"packages on {n} differ from the majority: {'; '.join(diffs[:8])}"
                + (f" (+{len(diffs) - 8} more)" if len(diffs) > 8 else ""), [n],
                actual=diffs, expected="the same package set on every node",
                fix=f"on {n}: pip install {pins}" if pins else f"on {n}: install the same packages as the other nodes",
            ))
        return out

    def _env_diff(self, uses):
        envs = {n: (u.get("env-vars") or {}).get("vars") or {} for n, u in uses.items() if u.get("env-vars")}
        if len(envs) < 2:
            return []
        out = []
        for var in sorted({v for e in envs.values() for v in e}):
            if var in NODE_SPECIFIC or any(var.endswith(s) for s in PER_NODE_OK):
                continue
            values = {n: e.get(var, "(unset)") for n, e in envs.items()}
            level = "fail" if var.startswith(HARD_PREFIXES) else "warn"
            out += self._field(f"env {var}", values,
                               f"set {var} identically on every node (propagate it through the launcher, e.g. "
                               f"srun --export=ALL, or put it in the job script rather than ~/.bashrc)", level)
        return out

    def _gpu_diff(self, uses):
        gpus = {n: (u.get("gpu") or {}).get("gpus") for n, u in uses.items() if u.get("gpu")}
        gpus = {n: g for n, g in gpus.items() if g is not None}
        models = {n: sorted({g.get("name") for g in gs}) for n, gs in gpus.items()}
        counts = {n: len(gs) for n, gs in gpus.items()}
        return (self._field("GPU model", models, "use nodes with the same GPU model in one job (NCCL tunes per topology)",
                            "warn")
                + self._field("GPU count", counts, "give every node the same number of GPUs, or set --nproc-per-node "
                                                   "to the smallest count"))
