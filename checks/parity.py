"""parity: the nodes run the same software: Python, torch/CUDA/NCCL build, driver, packages, communication
env vars, GPU model and count, the set of checks, ddpdoctor itself and (with --code) the training code.
Each difference names the node that differs from the majority, with both values; with no majority (two
nodes, 2 against 2) it names every side and says so, and its fix picks no side. With --baseline FILE (a
known-good run) a node is odd when it differs from that run, whatever the count.

What must agree is not decided here: every check declares it (``Check.comparable``, ddpdoctor.api), plugins
included, and this check compares the union of every node's comparables. It knows only how to word a
difference of a built-in check's keys (``WORDING``); a plugin's keys read "CHECK KEY on NODE differs"."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path
from shlex import quote

from typing import Any

from ddpdoctor.api import (TOOL_VERSION, Check, Split, baseline_name, baseline_values, nodes_text, passed_if_quiet,
                           split)

HARD_PREFIXES = ("NCCL_", "TORCH_", "GLOO_")  # env variables whose difference fails (others warn)
CODE_HASH_LIMIT = 20000  # files hashed outside git; beyond that the fingerprint says it is partial
CODE_WALK_DEPTH, CODE_WALK_ENTRIES = 32, 200_000  # and folders walked: os.walk recurses (3000 deep: RecursionError)


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
    top, seen, cut = len(Path(p).parts), 0, False
    for root, dirs, files in os.walk(p):  # bounded: depth (os.walk recurses) and entries looked at
        seen += len(dirs) + len(files)
        if dirs and (len(Path(root).parts) - top >= CODE_WALK_DEPTH or seen > CODE_WALK_ENTRIES):
            dirs[:], cut = [], True
        dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__"))
        for name in sorted(files):
            if count >= CODE_HASH_LIMIT:
                break
            f = Path(root) / name
            try:
                if not stat.S_ISREG(os.lstat(f).st_mode):  # a FIFO would block the read, /dev links never end
                    continue
                h.update(str(f.relative_to(p)).encode() + b"\0" + f.read_bytes())
            except OSError:
                continue
            count += 1
    return {"kind": "content", "files": count, "partial": cut or count >= CODE_HASH_LIMIT, "fingerprint": h.hexdigest()[:16]}


BUILD_FIX = ("all nodes must run the identical environment/image: same Python, torch, CUDA and NCCL "
             "(pip install torch==<version> on the odd node, or use one container image)")


def _env_wording(key: str) -> tuple[str, str, str]:
    return (f"env {key}", "fail" if key.startswith(HARD_PREFIXES) else "warn",
            f"set {quote(key)} identically on every node (propagate it through the launcher, e.g. srun --export=ALL, or "
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
    # a node that says how many processes it starts (--nproc-per-node, LOCAL_WORLD_SIZE) leaves its count out
    # of its comparables: the gpu check judges its GPUs against its own processes (heterogeneous nodes)
    ("gpu", "count"): ("GPU count", "fail", "give every node the same number of GPUs, or set --nproc-per-node "
                                            "to the smallest count; nodes meant to differ: start each with "
                                            "--nproc-per-node equal to its GPUs and pass that to the preflight too"),
    ("env-vars", None): _env_wording,
}
# The value a node lacking a key is compared with; checks not listed: such nodes take no part for that key.
MISSING = {"env-vars": "(unset)", "packages": "(missing)"}
# The order findings come in: the build before the packages, the environment, then the GPUs and the rest.
ORDER = [("parity", None), ("torch-build", None), ("gpu", "driver_version"), ("packages", None),
         ("env-vars", None), ("gpu", None)]


_AS_INTENDED = (". If the change is intended, rerun without --baseline and keep that run's cluster.json as the "
                "new baseline")


def _rank(check: str, key: str) -> tuple:
    for i, (c, k) in enumerate(ORDER):
        if c == check and k in (None, key):
            return (i, check, key)
    return (len(ORDER), check, key)


def _pin(text: str) -> str:
    """One shell word, always in single quotes (`'torch==2.4.0'`): values from other nodes go into a line to paste."""
    return f"'{text}'" if "'" not in text else quote(text)


def wording(check: str, key: str) -> tuple[str, str, str]:
    rule = WORDING.get((check, key)) or WORDING.get((check, None))
    if callable(rule):
        return rule(key)
    return rule or (f"{check} {key}", "fail", f"make {check} {quote(key)} the same on every node (see the {check} check)")


class ParityCheck(Check):
    name = "parity"
    description = "Same Python, torch/CUDA/NCCL, driver, packages, env vars, GPUs, checks and code on every node"
    phase = "cluster"
    cross_node = True  # a job's prologs meet for it (unattended/meet.py)
    reads_comparables = True  # every check's comparables arrive in compare as facts["comparable"]
    per_run_keys = ("ddpdoctor", "checks", "code")  # the tool, the checks selected and the code change between runs

    def gather(self, ctx) -> dict:
        view = ctx.cluster
        facts = {"ddpdoctor": TOOL_VERSION, "checks": view.me.get("checks", [])}
        if view.code_dir:
            facts["code"] = {"dir": view.code_dir, **code_fingerprint(view.code_dir)}
        return facts

    def comparable(self, facts: dict) -> dict:
        out = {k: facts.get(k) for k in ("ddpdoctor", "checks")}
        if isinstance(facts.get("code"), dict):
            out["code"] = facts["code"].get("fingerprint")
        return out

    def compare(self, facts_by_node, opts):
        reference = baseline_name(opts)
        if len(facts_by_node) < 2 and not reference:
            return [self.skip("one node: nothing to compare", sorted(facts_by_node))]
        by_node = {n: f.get("comparable") or {} for n, f in facts_by_node.items()}
        keys = sorted({(c, k) for comp in by_node.values() for c, kv in comp.items() if isinstance(kv, dict)
                       for k in kv}, key=lambda ck: _rank(*ck))
        out: list = []
        packages: list[tuple[str, Split]] = []
        for check, key in keys:
            having = {n: comp[check] for n, comp in by_node.items() if isinstance(comp.get(check), dict)}
            values = {n: kv.get(key, MISSING.get(check)) for n, kv in having.items()}
            if check != "packages":
                values = {n: v for n, v in values.items() if v is not None}  # not measured there: no part
            accepted = baseline_values(opts, check, key, MISSING.get(check))
            s = split(values, accepted)
            if not s.odd:
                continue
            if check == "packages":
                packages.append((key, s))
                continue
            if packages and _rank(check, key) > _rank("packages", ""):
                out += self._package_results(packages, reference)
                packages = []
            # a baseline that accepts each of the differing values (its own nodes differed) cannot say
            out += self._differences(check, key, s, reference, ambiguous=bool(accepted) and s.basis != "baseline")
        out += self._package_results(packages, reference)
        where = f", as in {reference}" if reference else ""
        return passed_if_quiet(out, self, sorted(facts_by_node), f"{len(facts_by_node)} nodes run the same software{where}")

    def _differences(self, check: str, key: str, s: Split, reference: str | None, ambiguous: bool = False) -> list:
        what, level, fix = wording(check, key)
        make = self.fail if level == "fail" else self.warn
        note = f" ({reference} has each of these values: its own nodes differed)" if ambiguous else ""
        if s.basis == "majority":
            return [make(f"{what} on {n} differs: {s.value_of(n)!r} vs {s.reference!r} on the others{note}", [n],
                         actual=s.value_of(n), expected=s.reference, fix=fix) for n in s.odd]
        if s.basis == "baseline":
            return [make(f"{what} on {nodes_text(nodes)} differs from {reference}: {value!r} vs {s.reference_text()}",
                         list(nodes), actual=value, expected=list(s.accepted) if len(s.accepted) > 1 else s.reference,
                         fix=f"{fix}; the baseline has {s.reference_text()}{_AS_INTENDED}")
                    for value, nodes in s.sides if nodes[0] in s.odd]
        return [make(f"{what} differs with no majority: {s.sides_text()}{note}", list(s.odd),
                     actual={n: s.value_of(n) for n in s.odd}, expected="the same value on every node",
                     fix=f"{fix}. No value is on more nodes than another, so nothing here says which is right: "
                         f"decide, or rerun with --baseline FILE (the cluster.json of a known-good run)")]

    def _package_results(self, diffs: list[tuple[str, Split]], reference: str | None) -> list:
        """One finding per odd node (against the majority or the baseline) listing its packages, and one per
        set of nodes that disagree with no majority, naming every side and pinning nothing."""
        # node -> [(package, its version, the reference, "baseline" or "others": what the reference is)]
        by_node: dict[str, list[tuple[str, str, str, str]]] = {}
        ties: dict[tuple[str, ...], list[tuple[str, Split]]] = {}
        for package, s in diffs:
            if s.no_majority:
                ties.setdefault(s.odd, []).append((package, s))
                continue
            # without a baseline, or with one that has each value (its own nodes differed): the majority
            label = "baseline" if s.basis == "baseline" else "others"
            for n in s.odd:
                by_node.setdefault(n, []).append((package, s.value_of(n), s.reference_text(str), label))
        out = []
        same: dict[tuple, list[str]] = {}  # nodes with the same differences: one finding (a whole cluster upgraded)
        for n, items in sorted(by_node.items()):
            same.setdefault(tuple(items), []).append(n)
        for items, nodes in sorted(same.items(), key=lambda kv: kv[1]):
            where = nodes_text(nodes)
            labels = {label for *_, label in items}
            against = " or ".join(([f"differ from {reference}"] if "baseline" in labels else [])
                                  + (["differ from the majority"] if "others" in labels else []))
            shown = [f"{p} {mine} ({label}: {ref})" for p, mine, ref, label in items]
            pins = " ".join(_pin(f"{p}=={ref}") for p, _, ref, _ in items if ref != MISSING["packages"]
                            and not ref.startswith("one of "))
            out.append(self.fail(
                f"packages on {where} {against}: {'; '.join(shown[:8])}"
                + (f" (+{len(shown) - 8} more)" if len(shown) > 8 else ""), nodes,
                actual=shown, expected="the same package set on every node",
                fix=(f"on {where}: pip install {pins}" if pins else
                     f"on {where}: install the same packages as the " + ("baseline" if "baseline" in labels
                                                                          else "other nodes"))
                + (_AS_INTENDED if "baseline" in labels else ""),
            ))
        for nodes, items in sorted(ties.items()):
            shown = [f"{p}: {s.sides_text(str)}" for p, s in items]
            out.append(self.fail(
                f"packages differ with no majority between {nodes_text(nodes)}: {' | '.join(shown[:8])}"
                + (f" (+{len(shown) - 8} more)" if len(shown) > 8 else ""), list(nodes),
                actual=shown, expected="the same package set on every node",
                fix=f"no version is on more nodes than another, so nothing here says which is right: decide which "
                    f"is (`pip list -v | grep -i {quote(str(items[0][0]))}` on each node shows where each copy lives: one on "
                    f"PYTHONPATH or in ~/.local shadows the environment's), install that version on every node, or "
                    f"rerun with --baseline FILE (the cluster.json of a known-good run)",
            ))
        return out
