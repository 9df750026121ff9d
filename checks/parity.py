"""parity: the nodes run the same software: Python, torch/CUDA/NCCL build, driver, packages, communication
env vars, GPU model and count, the set of checks, ddpdoctor itself and (with --code) the training code.
Each difference names the node that differs from the majority, with both values.

What must agree is not decided here: every check declares it (``Check.comparable``, ddpdoctor.api), plugins
included, and this check compares the union of every node's comparables. It knows only how to word a
difference of a built-in check's keys (``WORDING``); a plugin's keys read "CHECK KEY on NODE differs"."""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from typing import Any

from ddpdoctor.api import Check, majority, odd_ones, passed_if_quiet

HARD_PREFIXES = ("NCCL_", "TORCH_", "GLOO_")  # env variables whose difference fails (others warn)
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


BUILD_FIX = ("all nodes must run the identical environment/image: same Python, torch, CUDA and NCCL "
             "(pip install torch==<version> on the odd node, or use one container image)")


def _env_wording(key: str) -> tuple[str, str, str]:
    return (f"env {key}", "fail" if key.startswith(HARD_PREFIXES) else "warn",
            f"set {key} identically on every node (propagate it through the launcher, e.g. srun --export=ALL, or "
            f"put it in the job script rather than ~/.bashrc)")


# (check, key) -> (what, level, fix); key None: any key of that check (a function of the key).
WORDING: dict[tuple[str, str | None], Any] = {
    ("parity", "ddpdoctor"): ("ddpdoctor version", "fail", "install the same ddpdoctor version on every node"),
    ("parity", "checks"): ("set of checks", "fail",
                           "install the same ddpdoctor plugins on every node (pip list | grep ddpdoctor)"),
    ("parity", "code"): ("training code", "fail", "sync the code to every node (same git commit, no local edits), "
                                                  "or run from a shared filesystem"),
    ("torch-build", None): lambda key: (f"torch-build {key}", "fail", BUILD_FIX),
    ("gpu", "driver_version"): ("NVIDIA driver", "fail", "install the same NVIDIA driver on every node"),
    ("gpu", "models"): ("GPU model", "warn", "use nodes with the same GPU model in one job (NCCL tunes per topology)"),
    ("gpu", "count"): ("GPU count", "fail", "give every node the same number of GPUs, or set --nproc-per-node "
                                            "to the smallest count"),
    ("env-vars", None): _env_wording,
}
# The value a node lacking a key is compared with; checks not listed: such nodes take no part for that key.
MISSING = {"env-vars": "(unset)", "packages": "(missing)"}
# The order findings come in: the build before the packages, the environment, then the GPUs and the rest.
ORDER = [("parity", None), ("torch-build", None), ("gpu", "driver_version"), ("packages", None),
         ("env-vars", None), ("gpu", None)]


def _rank(check: str, key: str) -> tuple:
    for i, (c, k) in enumerate(ORDER):
        if c == check and k in (None, key):
            return (i, check, key)
    return (len(ORDER), check, key)


def wording(check: str, key: str) -> tuple[str, str, str]:
    rule = WORDING.get((check, key)) or WORDING.get((check, None))
    if callable(rule):
        return rule(key)
    return rule or (f"{check} {key}", "fail", f"make {check} {key} the same on every node (see the {check} check)")


class ParityCheck(Check):
    name = "parity"
    description = "Same Python, torch/CUDA/NCCL, driver, packages, env vars, GPUs, checks and code on every node"
    phase = "cluster"
    reads_comparables = True  # every check's comparables arrive in compare as facts["comparable"]

    def gather(self, ctx) -> dict:
        from ddpdoctor import __version__

        view = ctx.cluster
        facts = {"ddpdoctor": __version__, "checks": view.me.get("checks", [])}
        if view.code_dir:
            facts["code"] = {"dir": view.code_dir, **code_fingerprint(view.code_dir)}
        return facts

    def comparable(self, facts: dict) -> dict:
        out = {k: facts.get(k) for k in ("ddpdoctor", "checks")}
        if isinstance(facts.get("code"), dict):
            out["code"] = facts["code"].get("fingerprint")
        return out

    def compare(self, facts_by_node, opts):
        if len(facts_by_node) < 2:
            return [self.skip("one node: nothing to compare", sorted(facts_by_node))]
        by_node = {n: f.get("comparable") or {} for n, f in facts_by_node.items()}
        keys = sorted({(c, k) for comp in by_node.values() for c, kv in comp.items() if isinstance(kv, dict)
                       for k in kv}, key=lambda ck: _rank(*ck))
        out, packages = [], {}
        for check, key in keys:
            having = {n: comp[check] for n, comp in by_node.items() if isinstance(comp.get(check), dict)}
            values = {n: kv.get(key, MISSING.get(check)) for n, kv in having.items()}
            if check == "packages":
                common, odd = majority(values)
                for n in odd:
                    packages.setdefault(n, []).append(f"{key} {values[n]} (others: {common})")
                continue
            if packages and _rank(check, key) > _rank("packages", ""):
                out += self._package_results(packages)
                packages = {}
            what, level, fix = wording(check, key)
            make = self.fail if level == "fail" else self.warn
            out += odd_ones(values, lambda n, v, common: make(
                f"{what} on {n} differs: {v!r} vs {common!r} on the others", [n], actual=v, expected=common, fix=fix))
        out += self._package_results(packages)
        return passed_if_quiet(out, self, sorted(facts_by_node), f"{len(facts_by_node)} nodes run the same software")

    def _package_results(self, by_node_diffs: dict[str, list[str]]) -> list:
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
